package bot

import (
	"math"
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

// History shows a figure a run did not measure (stored as null, or an
// accept length of 0 from before unknown figures were null) as "—", never
// 0.00 or NaN, and says once what the dash means; comparisons likewise.
func TestHistoryShowsUnknownAsDash(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 4, 5, 0, time.UTC)
	nan := math.NaN()
	rows := []store.BenchResult{
		{JobID: 9, At: at, Settings: "steps=0,topk=0,draft=0", OutputTokS: 2950, PerStreamTokS: 46, AcceptLen: nan, AcceptRate: nan},
		{JobID: 8, At: at, Settings: "steps=3,topk=1,draft=4", OutputTokS: 270, PerStreamTokS: 90, AcceptLen: 0, AcceptRate: 0},
		{JobID: 7, At: at, Settings: "steps=3,topk=1,draft=4", OutputTokS: 280, PerStreamTokS: 91, AcceptLen: 3.1, AcceptRate: 0.7},
	}
	h := renderHistory("qwen", rows)
	lines := strings.Split(strings.TrimRight(h, "\n"), "\n")
	if strings.Contains(h, "NaN") || strings.Contains(lines[2], "0.00") || strings.Contains(lines[3], "0.00") ||
		strings.Count(lines[2], "—") != 2 || strings.Count(lines[3], "—") != 2 || !strings.Contains(lines[4], "3.10") {
		t.Errorf("history:\n%s", h)
	}
	if strings.Count(h, "not measured") != 1 {
		t.Errorf("history does not say once what — means:\n%s", h)
	}
	cmp := report.CompareLine("same settings last time", rows[0], &ops.BenchResult{OutputTokS: 2900, AcceptLen: nan})
	if strings.Contains(cmp, "NaN") || !strings.Contains(cmp, "accept len — → —") {
		t.Errorf("compare: %s", cmp)
	}
}
