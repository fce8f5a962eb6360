package bot

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// Times the bot renders carry their zone: thread lines, comparisons, history.
func TestTimesSayUTC(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 4, 5, 0, time.FixedZone("CET", 3600))
	prev := store.BenchResult{JobID: 7, At: at, OutputTokS: 270, AcceptLen: 3.1}
	for name, got := range map[string]string{
		"event":   report.RenderEvent(ops.Event{At: at, Step: "stop", Status: ops.StepDone, Message: "inactive"}),
		"compare": report.CompareLine("same settings last time", prev, &ops.BenchResult{OutputTokS: 280, AcceptLen: 3.2}),
		"history": renderHistory("qwen", []store.BenchResult{prev}),
	} {
		want := "09:04"
		if !strings.Contains(got, want) || !strings.Contains(got, "UTC") {
			t.Errorf("%s: %q does not show %s UTC", name, got, want)
		}
	}
}
