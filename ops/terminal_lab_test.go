package ops_test

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	labengine "github.com/opsbot/opsbot/lab/engine"
	"github.com/opsbot/opsbot/ops"
)

// mtp tune over a range whose top is still below the peak (2..3 at
// concurrency 1, where the lab's physics peaks far higher) chooses the top
// and says that the peak may lie beyond it, with the command that searches
// further; it never presents the edge as the narrowed-down peak alone.
func TestTuneBestOnTheEdgeSaysSo(t *testing.T) {
	// Not t.Parallel(): it compares throughput the lab measures in wall time, so it runs in
	// the package's serial phase, before and apart from the package's parallel tests.
	ph := labengine.DefaultPhysics()
	if !(ph.StreamTokS(labengine.Chain(3), 1) > ph.StreamTokS(labengine.Chain(2), 1) && ph.StreamTokS(labengine.Chain(4), 1) > ph.StreamTokS(labengine.Chain(3), 1)) {
		t.Fatal("the lab's physics no longer rises from steps 2 to 4 at concurrency 1: choose another range")
	}
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 1, InputLen: 32, OutputLen: 64}
	})
	ev := &events{}
	res, err := r.rb.Tune(testkit.Context(t, 60*time.Second), "qwen", ops.TuneOptions{From: 2, To: 3, Concurrency: 1}, ev)
	if err != nil {
		t.Fatalf("tune: %v\n%s", err, ev.text())
	}
	if res.Best == nil || res.Best.Steps != 3 {
		t.Fatalf("best %+v, want steps 3 (tried %v)", res.Best, res.Tried)
	}
	for _, want := range []string{"Steps 3 is the top of the range 2..3 searched, and tok/s was still rising toward it (steps 2: ",
		"the peak may lie beyond it. `mtp tune qwen 3..5 at 1` searches the wider range."} {
		if !strings.Contains(res.Summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, res.Summary)
		}
		if !strings.Contains(strings.Join(res.Details, "\n"), want) {
			t.Errorf("details lack %q:\n%s", want, strings.Join(res.Details, "\n"))
		}
	}
}

// `svc status` of a stopped unit says the unit is stopped and its port
// closed because of it, with the command that starts it; never that the
// model is loading. Stopping it again says it is already stopped.
func TestStatusOfAStoppedUnit(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), nil)
	ev := &events{}
	if _, err := r.rb.ServiceAction(testkit.Context(t, 60*time.Second), "qwen", "stop", false, ev); err != nil {
		t.Fatalf("stop: %v\n%s", err, ev.text())
	}
	res, err := r.rb.ServiceStatus(testkit.Context(t, 60*time.Second), "qwen", ev)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if !strings.Contains(res.Summary, "inactive/dead") || !strings.Contains(res.Summary, "engine port closed: the unit is stopped; `svc start qwen` starts it") ||
		strings.Contains(res.Summary, "loading") {
		t.Errorf("status of a stopped unit: %q", res.Summary)
	}
}
