package ops_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/internal/testrun"
	labengine "github.com/opsbot/opsbot/lab/engine"
	"github.com/opsbot/opsbot/ops"
)

// The figures of issue 24 §1 and §2 on the lab's default service: a per-load
// tune at 1,8,32,64 starts each value once, benchmarks it at every
// concurrency, finds deep speculation best at 1 and shallow at 64, proposes
// an adaptive file the lab's SGLang accepts with the unit flags that enable
// it, and leaves the unit as it was.
func TestTunePerLoadOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 48}
	})
	before := r.unitText(t)
	ev := &events{}
	at := []int{1, 8, 32, 64}
	res, err := r.rb.TunePerLoad(testCtx(t), "qwen", ops.PerLoadOptions{At: at, From: 1, To: 12}, ev)
	if err != nil {
		t.Fatalf("tune per load: %v\n%s", err, ev.text())
	}
	pl := res.PerLoad
	if pl == nil || len(pl.Rows) != len(at) {
		t.Fatalf("no proposal: %+v", res)
	}
	first, last := pl.Rows[0], pl.Rows[len(pl.Rows)-1]
	if first.Steps < last.Steps+3 {
		t.Errorf("best steps %d at concurrency 1 and %d at 64: want deep speculation at 1, shallow at 64", first.Steps, last.Steps)
	}
	seen := map[int]bool{}
	for _, n := range res.Tried {
		if seen[n] {
			t.Errorf("steps %d started twice: %v", n, res.Tried)
		}
		seen[n] = true
		for _, c := range at {
			if !slices.ContainsFunc(res.Points, func(p ops.SweepPoint) bool { return p.Steps == n && p.Concurrency == c && p.OK }) {
				t.Errorf("steps %d has no benchmark at concurrency %d", n, c)
			}
		}
	}
	if len(res.Tried) >= 12 || res.Restarts > len(res.Tried)+1 {
		t.Errorf("%d values tried, %d restarts: want fewer than the full grid's 12", len(res.Tried), res.Restarts)
	}
	cfg, err := labengine.ParseAdaptiveConfig([]byte(pl.FileText))
	if err != nil {
		t.Fatalf("the lab's SGLang refuses the proposed file: %v\n%s", err, pl.FileText)
	}
	if !slices.Contains(cfg.CandidateSteps(), pl.Steps) || cfg.Slots[0].BatchSize != 1 || len(cfg.Slots) != len(at) {
		t.Errorf("file slots %+v, unit steps %d", cfg.Slots, pl.Steps)
	}
	if pl.File != "/etc/sglang/qwen-adaptive.json" || pl.Unit == nil ||
		!strings.Contains(pl.Unit.Diff, "+") || !strings.Contains(pl.Unit.After, "--speculative-adaptive-config /etc/sglang/qwen-adaptive.json") ||
		!strings.Contains(pl.Unit.After, "--speculative-adaptive ") {
		t.Errorf("proposal file %q unit %+v", pl.File, pl.Unit)
	}
	if last.Queued != 16 {
		t.Errorf("concurrency 64: %d queued, want 16 (SGLang's cap of 48 with speculation)", last.Queued)
	}
	for _, row := range pl.Rows {
		if row.GainPct < -0.01 || row.AcceptRate > 1 || row.AcceptLen > float64(row.Steps+1) {
			t.Errorf("row %+v: gain below zero, or acceptance out of bounds", row)
		}
	}
	if !strings.Contains(strings.Join(res.Details, "\n"), "Requests queued: 16 of 64 at concurrency 64.") {
		t.Errorf("the report does not say how many requests queued at 64:\n%s", strings.Join(res.Details, "\n"))
	}
	if after := r.unitText(t); after != before {
		t.Errorf("unit changed:\n%s", after)
	}
	t.Logf("%s\n%s", res.Summary, strings.Join(res.Details, "\n"))
}
