package commands

import (
	"testing"

	"github.com/opsbot/opsbot/ops"
)

// NameLeft writes the commands a pipeline names by kind, in the words Parse
// reads: each parses back to the command that takes the step.
func TestNameLeft(t *testing.T) {
	for _, c := range []struct {
		step       ops.NextStep
		next, does string
	}{
		{ops.NextStart, "svc start qwen", "svc start"},
		{ops.NextStatus, "svc status qwen", "svc status"},
		{ops.NextRecover, "gpu recover qwen", "gpu recover"},
		{ops.NextGPUs, "gpu status gpu1", "gpu status"},
		{"", "", ""},
	} {
		l := &ops.ServiceLeft{Service: "qwen", Host: "gpu1", NextStep: c.step, UndoSteps: 3}
		NameLeft(l)
		if l.Next != c.next || l.Undo != "mtp steps 3 qwen" {
			t.Errorf("%q: next %q undo %q, want %q and %q", c.step, l.Next, l.Undo, c.next, "mtp steps 3 qwen")
		}
		if c.next == "" {
			continue
		}
		back, err := Parse(l.Next, optsOne)
		if err != nil || back.Spec().Path != c.does {
			t.Errorf("%q parses as %v %v, want %s", l.Next, back, err, c.does)
		}
	}
	NameLeft(nil) // a result without a left state: nothing to name
}
