package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
)

var _ bot.RoomLevels = (*Adapter)(nil)

// powerLevels is what the adapter keeps of a room's m.room.power_levels:
// the users' levels and the level of everyone else.
type powerLevels struct {
	Users        map[id.UserID]int `json:"users"`
	UsersDefault int               `json:"users_default"`
}

func (p powerLevels) of(user id.UserID) int {
	if l, ok := p.Users[user]; ok {
		return l
	}
	return p.UsersDefault
}

// LevelIn is bot.RoomLevels: user's power level in room, from the room's
// m.room.power_levels state as the adapter last saw it (fetched when the
// sync starts, then updated from the sync's state events, in timeline
// order, so a command sent after a change is judged by the change). A room
// without that state event gives everyone level 0. False for a room outside
// matrix.rooms or whose levels could not be read. Never a display name:
// user is the Matrix user id.
func (a *Adapter) LevelIn(room, user string) (int, bool) {
	a.levelsMu.RLock()
	defer a.levelsMu.RUnlock()
	p, ok := a.levels[id.RoomID(room)]
	if !ok {
		return 0, false
	}
	return p.of(id.UserID(user)), true
}

// setLevels keeps p as room's power levels; nil forgets them.
func (a *Adapter) setLevels(room id.RoomID, p *powerLevels) {
	a.levelsMu.Lock()
	defer a.levelsMu.Unlock()
	if p == nil {
		delete(a.levels, room)
		return
	}
	a.levels[room] = *p
}

func (a *Adapter) hasLevels(room id.RoomID) bool {
	a.levelsMu.RLock()
	defer a.levelsMu.RUnlock()
	_, ok := a.levels[room]
	return ok
}

// fetchLevels reads room's m.room.power_levels from the homeserver and
// keeps it. On failure the room's levels stay unknown (no role is granted
// by level there) until a sync delivers them or the next fetch works.
func (a *Adapter) fetchLevels(ctx context.Context, cli *mautrix.Client, room id.RoomID) error {
	var p powerLevels
	err := cli.StateEvent(ctx, room, event.StatePowerLevels, "", &p)
	if errors.Is(err, mautrix.MNotFound) {
		p, err = powerLevels{}, nil // no power levels: everyone is at 0
	}
	if err != nil {
		return fmt.Errorf("read the power levels of %s: %w", room, err)
	}
	a.setLevels(room, &p)
	return nil
}

// fetchAllLevels reads the power levels of every allowed room the bot is in:
// a sync that resumes from a stored token carries only changes.
func (a *Adapter) fetchAllLevels(ctx context.Context, cli *mautrix.Client) {
	for r := range a.allowed {
		if err := a.fetchLevels(ctx, cli, r); err != nil && ctx.Err() == nil {
			a.log.Warn("power levels unknown until the room's next change (matrix.power_levels grants no role there meanwhile)",
				"room", r, "err", err)
		}
	}
}

// levelsEvent keeps the power levels an m.room.power_levels state event of
// an allowed room sets; other events are left alone.
func (a *Adapter) levelsEvent(room id.RoomID, evt *event.Event) {
	if !a.allowed[room] || evt.Type.Type != event.StatePowerLevels.Type || evt.StateKey == nil || *evt.StateKey != "" {
		return
	}
	var p powerLevels
	if err := json.Unmarshal(evt.Content.VeryRaw, &p); err != nil {
		// Unreadable: grant nothing by level rather than go on with old levels.
		a.log.Warn("unreadable power levels: no role is granted by level in this room until they change", "room", room,
			"event", evt.ID, "err", err)
		a.setLevels(room, nil)
		return
	}
	a.setLevels(room, &p)
}
