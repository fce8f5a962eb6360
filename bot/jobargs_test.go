package bot

import (
	"reflect"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/store"
)

// A job keeps its typed command and whether it is a dry run, as the door
// accepted it, also when it was refused: what undo, the watchdog and `job N`
// read back instead of its text.
func TestJobKeepsItsTypedCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	for _, c := range []struct {
		user, text string
		want       commands.Command
		status     store.Status
	}{
		{"olga", "mtp steps 4 qwen --dry-run", &commands.MTPSteps{On: commands.On{Service: "qwen", Host: "gpu1"}, Steps: 4, DryRun: true}, store.Succeeded},
		{"olga", "mtp steps 5 qwen", &commands.MTPSteps{On: commands.On{Service: "qwen", Host: "gpu1"}, Steps: 5}, store.Succeeded},
		{"vic", "svc restart qwen", &commands.SvcRestart{On: commands.On{Service: "qwen", Host: "gpu1"}}, store.Refused},
	} {
		r := h.handle(c.user, c.text)
		if r.JobID == 0 {
			t.Fatalf("%s: no job: %s %s", c.text, r.Outcome, r.Text)
		}
		j := h.wait(r.JobID)
		if j.Status != c.status {
			t.Fatalf("%s: %s %s, want %s", c.text, j.Status, j.Error, c.status)
		}
		got, err := commands.Decode(j.Args)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: kept %s as %#v (%v), want %#v", c.text, j.Args, got, err, c.want)
		}
		if j.DryRun != commands.IsDryRun(c.want) {
			t.Errorf("%s: dry run %v, want %v", c.text, j.DryRun, commands.IsDryRun(c.want))
		}
	}
}
