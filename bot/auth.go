package bot

import (
	"fmt"
	"sync"

	"github.com/opsbot/opsbot/commands"
)

// RoleNone is the role of a user who may run nothing.
const RoleNone commands.Role = 0

// Auth decides who holds which role. It denies by default: a user who is not
// listed gets the default role, which is "none" unless the config says otherwise.
// Auth is safe for concurrent use; Replace swaps its roles on a config reload.
type Auth struct {
	mu          sync.RWMutex // Replace swaps the roles under it
	defaultRole commands.Role
	users       map[string]commands.Role // "platform:id" -> role
	groups      map[string]Membership    // platform -> its user groups
}

// Membership tells which groups of a platform a user belongs to (Slack's
// user groups), so that roles granted to a group ("slack-group:S0123") apply
// to its members. An adapter implements it from a cache it keeps fresh: it
// answers at once, without I/O, and is safe for concurrent use. The role
// decision stays in Auth.
type Membership interface {
	// GroupsOf returns the ids of the groups user is a member of.
	GroupsOf(user string) []string
}

// NewAuth builds an Auth from role names ("none", "viewer", "operator",
// "admin"). users maps "platform:id" to a role name; a key without both parts
// ("console:", ":alice", "alice") is an error, never a user.
func NewAuth(defaultRole string, users map[string]string) (*Auth, error) {
	dr, err := parseRole(defaultRole)
	if err != nil {
		return nil, fmt.Errorf("auth default role: %w", err)
	}
	a := &Auth{defaultRole: dr, users: make(map[string]commands.Role, len(users))}
	for id, name := range users {
		if !validKey(id) {
			return nil, fmt.Errorf("auth user %q: want platform:id, e.g. console:alice or slack:U123", id)
		}
		r, err := parseRole(name)
		if err != nil {
			return nil, fmt.Errorf("auth user %s: %w", id, err)
		}
		a.users[id] = r
	}
	return a, nil
}

func parseRole(name string) (commands.Role, error) {
	if name == "" || name == "none" {
		return RoleNone, nil
	}
	return commands.ParseRole(name)
}

// WithMembership returns a copy of a in which the roles granted to groups of
// platform ("PLATFORM-group:ID" keys) apply to the members m reports.
func (a *Auth) WithMembership(platform string, m Membership) *Auth {
	a.mu.RLock()
	defer a.mu.RUnlock()
	c := &Auth{defaultRole: a.defaultRole, users: a.users, groups: make(map[string]Membership, len(a.groups)+1)}
	for p, g := range a.groups {
		c.groups[p] = g
	}
	c.groups[platform] = m
	return c
}

// Role returns the role of user on platform. Identity is the platform's stable
// user id (never a display name). A user listed by id and a member of listed
// groups holds the highest of those roles; a user listed nowhere holds the
// default role.
func (a *Auth) Role(platform, user string) commands.Role {
	a.mu.RLock()
	defer a.mu.RUnlock()
	r, ok := a.users[platform+":"+user]
	if m := a.groups[platform]; m != nil && user != "" {
		for _, g := range m.GroupsOf(user) {
			if gr, found := a.users[platform+"-group:"+g]; found && (!ok || gr > r) {
				r, ok = gr, true
			}
		}
	}
	if ok {
		return r
	}
	return a.defaultRole
}

// Allowed reports whether user may run a command that needs role need.
func (a *Auth) Allowed(platform, user string, need commands.Role) bool {
	have := a.Role(platform, user)
	return have != RoleNone && have >= need
}

// Replace makes a's roles those of b, at once for every later check (a
// config reload). Safe for concurrent use with Role and Allowed.
func (a *Auth) Replace(b *Auth) {
	b.mu.RLock()
	dr, users := b.defaultRole, b.users
	b.mu.RUnlock()
	a.mu.Lock()
	a.defaultRole, a.users = dr, users
	a.mu.Unlock()
}

func roleName(r commands.Role) string {
	if r == RoleNone {
		return "none"
	}
	return r.String()
}
