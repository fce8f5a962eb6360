package bot

import (
	"testing"

	"github.com/opsbot/opsbot/commands"
)

type groupsOf map[string][]string

func (g groupsOf) GroupsOf(user string) []string { return g[user] }

// TestGroupRoles: a role granted to a platform's user group applies to its
// members on that platform only; a user listed by id and in groups holds the
// highest; everyone else keeps the default; WithMembership leaves the
// original Auth as it was.
func TestGroupRoles(t *testing.T) {
	base, err := NewAuth("none", map[string]string{"slack:U1": "viewer", "slack-group:S1": "operator",
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
			t.Errorf("%s:%s: %s, want %s", c.platform, c.user, roleName(got), roleName(c.want))
		}
	}
	if got := base.Role("slack", "U2"); got != RoleNone {
		t.Errorf("WithMembership changed the original Auth: U2 is %s", roleName(got))
	}
}
