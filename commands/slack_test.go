package commands

import (
	"slices"
	"testing"
)

// InSlack types a command after its own slash command when its group has
// one, after /opsbot otherwise; every group with its own is a command group.
func TestInSlack(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mtp steps 10", "/mtp steps 10"},
		{"jobs all", "/jobs all"},
		{"job 42", "/opsbot job 42"},
		{"ack 3", "/opsbot ack 3"},
		{"watchdog silence qwen 2h", "/opsbot watchdog silence qwen 2h"},
		{"  help  ", "/opsbot help"},
	} {
		if got := InSlack(tc.in); got != tc.want {
			t.Errorf("InSlack(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	cmds := SlashCommands()
	if cmds[len(cmds)-1] != SlackCatchAll {
		t.Fatalf("SlashCommands() = %v: the catch-all comes last", cmds)
	}
	for _, c := range cmds[:len(cmds)-1] {
		if !slices.Contains(groups, c[1:]) {
			t.Errorf("slash command %s is no command group (%v)", c, groups)
		}
	}
}
