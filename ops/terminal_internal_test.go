package ops

import (
	"math"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/systemd"
)

// A best steps value on the edge of the range searched is said, with the
// command that searches the wider range (within 1..max steps); one inside
// the range, or on an edge with nothing beyond, is not.
func TestTuneEdge(t *testing.T) {
	t.Parallel()
	tok := map[int]float64{2: 100, 6: 180, 7: 190, 8: 200, 3: 150, 4: 140}
	for _, tc := range []struct {
		from, to, best, max int
		want                string // "" for no edge
	}{
		{2, 8, 8, 16, "Steps 8 is the top of the range 2..8 searched, and tok/s was still rising toward it (steps 7: 190.0, steps 8: 200.0): " +
			"the peak may lie beyond it. `mtp tune qwen 8..14 at 4` searches the wider range."},
		{2, 8, 8, 10, "`mtp tune qwen 8..10 at 4`"},
		{3, 8, 3, 16, "Steps 3 is the bottom of the range 3..8 searched, and tok/s was still rising toward it (steps 4: 140.0, steps 3: 150.0): " +
			"the peak may lie beyond it. `mtp tune qwen 1..3 at 4` searches the wider range."},
		{6, 8, 8, 16, "`mtp tune qwen 8..10 at 4`"},
		{2, 8, 7, 16, ""},
		{1, 8, 1, 16, ""},
		{2, 16, 16, 16, ""},
	} {
		got := tuneEdge("qwen", tc.from, tc.to, 4, tc.best, tc.max, tok)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%d..%d best %d (max %d): %q, want %q", tc.from, tc.to, tc.best, tc.max, got, tc.want)
		}
	}
	// A neighbour that failed is not quoted as a figure.
	if got := tuneEdge("qwen", 2, 5, 1, 5, 16, map[int]float64{4: math.Inf(-1), 5: 90}); strings.Contains(got, "rising") || !strings.Contains(got, "`mtp tune qwen 5..8 at 1`") {
		t.Errorf("failed neighbour: %q", got)
	}
}

// A stopped unit reads as stopped: its engine's closed port is because of
// that (with the command that starts it), and a unit systemd marks failed
// is stopped all the same, never a stop that failed.
func TestStoppedWording(t *testing.T) {
	t.Parallel()
	inactive := systemd.State{ActiveState: "inactive", SubState: "dead"}
	failed := systemd.State{ActiveState: "failed", SubState: "failed"}
	if got := engineText("qwen", inactive, engine.PhaseRefused); got != "port closed: the unit is stopped; `svc start qwen` starts it" {
		t.Errorf("inactive: %q", got)
	}
	if got := engineText("qwen", failed, engine.PhaseRefused); !strings.Contains(got, "last run failed (`svc logs qwen` shows why); `svc start qwen` starts it") {
		t.Errorf("failed: %q", got)
	}
	if got := engineText("qwen", systemd.State{ActiveState: "active", SubState: "running"}, engine.PhaseRefused); !strings.Contains(got, "loading the model") {
		t.Errorf("a running unit whose port is not open yet: %q", got)
	}
	if got := stoppedText(failed); !strings.HasPrefix(got, "stopped") {
		t.Errorf("a stopped unit systemd marks failed: %q", got)
	}
	if got := stoppedText(inactive); got != "inactive" {
		t.Errorf("inactive: %q", got)
	}
}
