package slack

import (
	"context"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// groupCache maps users to the user groups they belong to, as
// usergroups.list (with include_users) last answered. Safe for concurrent use.
type groupCache struct {
	mu     sync.RWMutex
	byUser map[string][]string
}

func (g *groupCache) of(user string) []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.byUser[user]
}

func (g *groupCache) set(groups []slack.UserGroup) {
	by := map[string][]string{}
	for _, ug := range groups {
		if ug.DateDelete != 0 {
			continue
		}
		for _, u := range ug.Users {
			by[u] = append(by[u], ug.ID)
		}
	}
	g.mu.Lock()
	g.byUser = by
	g.mu.Unlock()
}

// refreshGroups lists the workspace's user groups with their members. On
// failure (no usergroups:read scope, Slack down) the last list stays, so a
// group's members keep their role until the next refresh succeeds.
func (a *Adapter) refreshGroups(ctx context.Context) {
	var groups []slack.UserGroup
	err := a.call(ctx, "usergroups.list", func(ctx context.Context) (err error) {
		groups, err = a.api.GetUserGroupsContext(ctx, slack.GetUserGroupsOptionIncludeUsers(true))
		return err
	})
	if err != nil {
		a.log.Warn("list user groups (roles granted to slack-group:ID keys need the usergroups:read scope)", "err", err)
		return
	}
	a.groups.set(groups)
}

func (a *Adapter) groupLoop(ctx context.Context) {
	t := time.NewTicker(a.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.refreshGroups(ctx)
		}
	}
}
