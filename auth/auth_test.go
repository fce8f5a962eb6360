package auth

import (
	"sync"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
)

type groupsOf map[string][]string

func (g groupsOf) GroupsOf(user string) []string { return g[user] }

// TestGroupRoles: a role granted to a platform's user group applies to its
// members on that platform only; a user listed by id and in groups holds the
// highest; everyone else keeps the default; WithMembership leaves the
// original Auth as it was.
func TestGroupRoles(t *testing.T) {
	t.Parallel()
	base, err := New("none", map[string]string{"slack:U1": "viewer", "slack-group:S1": "operator",
		"slack-group:S2": "admin", "slack:U4": "admin"})
	if err != nil {
		t.Fatal(err)
	}
	a := base.WithMembership("slack", groupsOf{"U1": {"S1"}, "U2": {"S1", "S2"}, "U3": {"S9"}, "U4": {"S1"}})
	cases := []struct {
		platform, user string
		want           commands.Role
	}{
		{"slack", "U1", commands.Operator}, // viewer by id, operator by group
		{"slack", "U2", commands.Admin},    // the highest of two groups
		{"slack", "U3", RoleNone},          // an unlisted group grants nothing
		{"slack", "U4", commands.Admin},    // a group never lowers a role
		{"slack", "U5", RoleNone},          // in no group
		{"matrix", "U2", RoleNone},         // groups are per platform
	}
	for _, c := range cases {
		if got := a.Role(c.platform, c.user); got != c.want {
			t.Errorf("%s:%s: %s, want %s", c.platform, c.user, RoleName(got), RoleName(c.want))
		}
	}
	if got := base.Role("slack", "U2"); got != RoleNone {
		t.Errorf("WithMembership changed the original Auth: U2 is %s", RoleName(got))
	}
}

// roomLevels is a RoomLevels the test sets by hand: the Matrix adapter's
// real one is tested against Dendrite in bot/matrix.
type roomLevels struct {
	mu sync.Mutex
	m  map[string]map[string]int // room -> user -> level
}

func (l *roomLevels) LevelIn(room, user string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	users, ok := l.m[room]
	return users[user], ok
}

func (l *roomLevels) set(room, user string, level int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[room] == nil {
		l.m[room] = map[string]int{}
	}
	l.m[room][user] = level
}

// TestPowerLevelRoles: with matrix.power_levels, a user holds the highest of
// the role their id grants and the role their power level grants in the
// room asked about; in another room, outside any room, on another platform
// or in a room whose levels are unknown, the level grants nothing; a level
// never lowers a role; a reload replaces the grants and keeps the adapter's
// levels.
func TestPowerLevelRoles(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{Auth: config.Auth{DefaultRole: "none", Users: map[string]config.Grant{
		"matrix:@vic:hs": config.RoleEverywhere("viewer"), "matrix:@ada:hs": config.RoleEverywhere("admin")}},
		Matrix: &config.Matrix{Enabled: true, PowerLevels: map[string]int{"operator": 50, "admin": 100}}}
	base, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lv := &roomLevels{m: map[string]map[string]int{}}
	for _, s := range []struct {
		room, user string
		level      int
	}{{"!a", "@bob:hs", 50}, {"!b", "@bob:hs", 0}, {"!a", "@vic:hs", 0}, {"!b", "@vic:hs", 100},
		{"!a", "@ada:hs", 0}, {"!a", "@max:hs", 99}, {"!a", "@top:hs", 1 << 40}} {
		lv.set(s.room, s.user, s.level)
	}
	a := base.WithRoomLevels("matrix", lv)
	cases := []struct {
		platform, room, user string
		want                 commands.Role
	}{
		{"matrix", "!a", "@bob:hs", commands.Operator}, // by level 50
		{"matrix", "!b", "@bob:hs", RoleNone},          // level 0 in the other room
		{"matrix", "!c", "@bob:hs", RoleNone},          // a room whose levels are unknown
		{"matrix", "", "@bob:hs", RoleNone},            // outside any room
		{"slack", "!a", "@bob:hs", RoleNone},           // levels are per platform
		{"matrix", "!a", "@vic:hs", commands.Viewer},   // by id; level 0 grants nothing
		{"matrix", "!b", "@vic:hs", commands.Admin},    // by level 100, above the id's role
		{"matrix", "!a", "@ada:hs", commands.Admin},    // a low level never lowers a role
		{"matrix", "!a", "@max:hs", commands.Operator}, // 99 is below admin's 100
		{"matrix", "!a", "@top:hs", commands.Admin},
	}
	for _, c := range cases {
		if got := a.RoleIn(c.platform, c.room, c.user); got != c.want {
			t.Errorf("%s:%s in %q: %s, want %s", c.platform, c.user, c.room, RoleName(got), RoleName(c.want))
		}
		if got := a.AllowedIn(c.platform, c.room, c.user, commands.Operator); got != (c.want >= commands.Operator) {
			t.Errorf("%s:%s in %q: allowed an operator command %v, role %s", c.platform, c.user, c.room, got, RoleName(c.want))
		}
	}
	if got := a.Role("matrix", "@bob:hs"); got != RoleNone {
		t.Errorf("Role outside a room: bob is %s", RoleName(got))
	}
	if got := base.RoleIn("matrix", "!a", "@bob:hs"); got != RoleNone {
		t.Errorf("WithRoomLevels changed the original Auth: bob is %s", RoleName(got))
	}
	// Levels change in the room: the next check sees them.
	lv.set("!b", "@bob:hs", 100)
	if got := a.RoleIn("matrix", "!b", "@bob:hs"); got != commands.Admin {
		t.Errorf("after bob was raised to 100: %s", RoleName(got))
	}

	// A reload replaces the grants; the adapter's levels stay.
	cfg.Matrix.PowerLevels = map[string]int{"viewer": 0, "operator": 99, "admin": 99}
	next, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Replace(next)
	for _, c := range []struct {
		room, user string
		want       commands.Role
	}{{"!a", "@max:hs", commands.Admin}, {"!a", "@bob:hs", commands.Viewer}, {"!c", "@bob:hs", RoleNone}} {
		if got := a.RoleIn("matrix", c.room, c.user); got != c.want {
			t.Errorf("after the reload, %s in %s: %s, want %s (equal levels grant the higher role)", c.user, c.room, RoleName(got), RoleName(c.want))
		}
	}
	cfg.Matrix.PowerLevels = nil
	next, err = FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Replace(next)
	if got := a.RoleIn("matrix", "!a", "@max:hs"); got != RoleNone {
		t.Errorf("power_levels removed by a reload: max is still %s", RoleName(got))
	}

	// A disabled matrix section grants nothing by level.
	cfg.Matrix = &config.Matrix{Enabled: false, PowerLevels: map[string]int{"admin": 0}}
	off, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := off.WithRoomLevels("matrix", lv).RoleIn("matrix", "!a", "@bob:hs"); got != RoleNone {
		t.Errorf("matrix disabled: bob is %s by level", RoleName(got))
	}

	for _, bad := range []map[string]int{{"none": 0}, {"root": 1}, {"operator": 50, "admin": 40}} {
		if _, err := base.WithLevelRoles("matrix", bad); err == nil {
			t.Errorf("WithLevelRoles(%v): no error", bad)
		}
	}
}
