package ops_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// mtp steps 0 takes the speculative options out of the unit byte-exactly
// (every other byte stays), the engine is verified to run without
// speculation and benchmarked; mtp undo puts the options back, byte for
// byte, and the engine speculates again. On SGLang and on vLLM.
func TestStepsZeroAndUndo(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	for _, tc := range []struct {
		engine, removed string
	}{
		{"sglang", "    --speculative-algorithm NEXTN \\\n    --speculative-num-steps 3 \\\n    --speculative-eagle-topk 1 \\\n    --speculative-num-draft-tokens 4 \\\n"},
		{"vllm", " \\\n    --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'"},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			t.Parallel()
			h := &history{}
			r := newRig(t, lab.Options{TimeScale: 1000, Engine: tc.engine}, func(c *ops.Config) { c.Changes = h })
			before := r.unitText(t)
			want := strings.Replace(before, tc.removed, "", 1)
			if want == before {
				t.Fatalf("the lab's unit has no %q", tc.removed)
			}
			dry, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 0, true, ops.Discard)
			if err != nil || r.unitText(t) != before || !strings.Contains(dry.Summary, "steps 3 -> 0 (speculative decoding off)") {
				t.Fatalf("dry run: %v %+v", err, dry)
			}
			ev := &events{}
			res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 0, false, ev)
			if err != nil {
				t.Fatalf("mtp steps 0: %v\n%s", err, ev.text())
			}
			if got := r.unitText(t); got != want {
				t.Fatalf("unit after steps 0:\n%s\nwant:\n%s", got, want)
			}
			if !strings.Contains(ev.text(), "engine runs without speculative decoding") || !strings.Contains(res.Summary, "no speculative decoding") ||
				res.Bench == nil || res.Bench.OutputTokS <= 0 || !math.IsNaN(res.Bench.AcceptLen) { // no acceptance: unknown, never 0
				t.Fatalf("summary %q, bench %+v\n%s", res.Summary, res.Bench, ev.text())
			}
			t.Logf("%s", res.Summary)
			h.add(ops.AppliedChange{JobID: 1, Command: "mtp steps 0 qwen", Status: "succeeded", Unit: *res.Unit})

			// Back to a value above 0 without undo: refused, naming undo, nothing changed.
			if _, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 5, false, ops.Discard); err == nil ||
				!strings.Contains(err.Error(), "`mtp undo qwen` puts back") || r.unitText(t) != want {
				t.Fatalf("mtp steps 5 on a unit without speculation: %v", err)
			}
			ev = &events{}
			undo, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ev)
			if err != nil {
				t.Fatalf("mtp undo: %v\n%s", err, ev.text())
			}
			if got := r.unitText(t); got != before {
				t.Fatalf("unit after undo:\n%s\nwant:\n%s", got, before)
			}
			if undo.Spec == nil || undo.Spec.Steps != 3 || !strings.Contains(undo.Summary, "steps 0 -> 3 (speculative decoding on)") {
				t.Fatalf("undo: %+v\n%s", undo, ev.text())
			}
		})
	}
}

// A sweep through 0 comes back from it: the values after 0 are planned on
// the unit the sweep found, and the sweep leaves the unit as it found it.
func TestSweepThroughZero(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
	})
	before := r.unitText(t)
	ev := &events{}
	res, err := r.rb.Sweep(testkit.Context(t, 60*time.Second), "qwen", ops.SweepOptions{Steps: []int{2, 0, 4}, At: []int{1, 64}}, ev)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, ev.text())
	}
	for _, p := range res.Points {
		if !p.OK {
			t.Errorf("point steps %d at %d failed: %s", p.Steps, p.Concurrency, p.Error)
		}
	}
	if len(res.Points) != 6 || res.Restarts != 4 {
		t.Errorf("%d points, %d restarts: want 6 and 4 (three values, and back to steps 3)", len(res.Points), res.Restarts)
	}
	if got := r.unitText(t); got != before {
		t.Fatalf("unit after the sweep:\n%s\nwant:\n%s", got, before)
	}
}

// In drop-in mode a sweep through 0 writes the drop-in each time: steps 0
// makes it without the speculative options, the next value puts them back
// there, and the sweep ends with the drop-in running the unit's own setting;
// the main unit is never touched.
func TestSweepThroughZeroDropIn(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
		s := c.Services["qwen"]
		s.DropIn = true
		c.Services["qwen"] = s
	})
	before := r.unitText(t)
	ev := &events{}
	res, err := r.rb.Sweep(testkit.Context(t, 60*time.Second), "qwen", ops.SweepOptions{Steps: []int{0, 5}}, ev)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, ev.text())
	}
	for _, p := range res.Points {
		if !p.OK {
			t.Errorf("point steps %d failed: %s", p.Steps, p.Error)
		}
	}
	if r.unitText(t) != before {
		t.Fatalf("the main unit changed in drop-in mode:\n%s", r.unitText(t))
	}
	b, err := r.lab.Host("gpu1").ReadFile("/etc/systemd/system/" + r.svc.Unit + ".d/opsbot.conf")
	if err != nil || !strings.Contains(string(b), "--speculative-num-steps 3") || !strings.Contains(string(b), "--speculative-algorithm NEXTN") {
		t.Fatalf("drop-in after the sweep: %v\n%s", err, b)
	}
}
