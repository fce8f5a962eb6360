package ops_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
)

// afterStep is a Reporter that notes when step ends ("": from the start),
// for a job's hold to change then (failsAfter).
type afterStep struct {
	events
	step string
	done atomic.Bool
}

func (w *afterStep) Report(ev ops.Event) {
	w.events.Report(ev)
	if ev.Step == w.step && ev.Status == ops.StepDone {
		w.done.Store(true)
	}
}

// failsAfter is a check of a job's hold (JobHold.Held, JobHold.WindDown)
// that returns err once step has ended.
func (w *afterStep) failsAfter(err error) func() error {
	return func() error {
		if w.step == "" || w.done.Load() {
			return err
		}
		return nil
	}
}

var errStoreFull = errors.New("opsbot's store refuses writes (database or disk is full)")

// TestWindDownLeavesTheServiceServing: a job asked to wind down (opsbot's
// store refuses writes) makes no new change and never leaves down a service
// it stopped: asked before the deploy, nothing changes; after the stop, the
// unchanged unit is started again; after the write, the new unit is started
// and verified and the benchmark is skipped. Each error names the reason
// and the state.
func TestWindDownLeavesTheServiceServing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		after   string // the step after which the wind down is asked; "" before any
		newUnit bool
		says    string
	}{
		{"", false, "not started"},
		{"stop", false, "the unit is unchanged and serves again"},
		{"write unit", true, "benchmark skipped"},
	} {
		t.Run("after "+c.after, func(t *testing.T) {
			r := newRig(t, labOpts(), nil)
			before := r.unitText(t)
			w := &afterStep{step: c.after}
			res, err := r.rb.For(ops.JobHold{WindDown: w.failsAfter(errStoreFull)}).MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 10, false, w)
			if err == nil || !errors.Is(err, errStoreFull) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err %v; want the store named and %q\n%s", err, c.says, w.text())
			}
			if changed := r.unitText(t) != before; changed != c.newUnit {
				t.Fatalf("unit changed: %v, want %v", changed, c.newUnit)
			}
			if st := r.lab.Host("gpu1").Unit(r.svc.Unit); !st.Ready {
				t.Fatalf("the service is left not serving: %+v\n%s", st, w.text())
			}
			if res != nil && res.Bench != nil {
				t.Fatal("benchmarked while winding down")
			}
			if strings.Contains(w.text(), "benchmark started") {
				t.Fatalf("the benchmark began:\n%s", w.text())
			}
		})
	}
}
