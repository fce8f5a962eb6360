package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	labengine "github.com/opsbot/opsbot/lab/engine"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// A per-load tune at 1,8,32,64 on the lab's default service: no
// speculation measured first, each value started once and benchmarked at
// every concurrency, deep speculation best at 1 and shallow or none at 64;
// then the proposal is itself started (the adaptive file and the unit
// flags, through the mtp steps pipeline) and benchmarked at every
// concurrency, and only then offered, with those figures against the best
// single setting and no speculation in its first lines; the unit and the
// adaptive file are left as found.
func TestTunePerLoadOnTheLab(t *testing.T) {
	// Not t.Parallel(): it compares throughput the lab measures in wall time, so it runs in
	// the package's serial phase, before and apart from the package's parallel tests.
	testrun.Long(t)
	// One wave per load instead of the tune's four: the test checks the
	// tune's decisions and records, not its figures (BenchmarkTunePerLoad
	// measures those with the real window), and four waves at 64 take
	// minutes on the lab.
	ops.ShortenPerLoadWindow(t, 1)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 48}
	})
	before := r.unitText(t)
	const file = "/etc/sglang/qwen-adaptive.json"
	ev := &events{}
	at := []int{1, 8, 32, 64}
	res, err := r.rb.TunePerLoad(testkit.Context(t, 10*time.Minute), "qwen", ops.PerLoadOptions{At: at, From: 1, To: 12}, ev)
	if err != nil {
		t.Fatalf("tune per load: %v\n%s", err, ev.text())
	}
	pl := res.PerLoad
	if pl == nil || len(pl.Rows) != len(at)+len(pl.Between) || !slices.Equal(pl.Between, []int{4, 16, 48}) {
		t.Fatalf("no proposal: %+v", res)
	}
	first, last := pl.Rows[0], pl.Rows[len(pl.Rows)-1]
	// The physics puts the peaks near 10 and none (lab/engine TestBestStepsFallWithLoad);
	// measured on two shared cores the curves are flat enough near them to
	// move a few steps, never across.
	if first.Steps <= last.Steps {
		t.Errorf("best steps %d at concurrency 1 and %d at 64: want deeper speculation at 1 than at 64", first.Steps, last.Steps)
	}
	// The steps running when the tune began (3) first, measured without a restart; then no
	// speculation.
	if len(res.Tried) < 2 || res.Tried[0] != 3 || res.Tried[1] != 0 || !strings.Contains(ev.text(), "running now: steps 3 at 64: benchmark") {
		t.Errorf("values tried %v: want the running steps 3 first, then no speculation (0)", res.Tried)
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
	// A slot holding only 0 (64: the physics' none) has the table measured with SGLang's
	// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND first, and without it only where that
	// measured more than 3% below the search (then the faster is proposed); the unit it
	// proposes sets the switch exactly when it does.
	if strings.Contains(pl.FileText, `{"candidate_steps": [0]}`) {
		details := strings.Join(res.Details, "\n")
		without := strings.Contains(ev.text(), "proposal without skip-zero-extend: write unit")
		compared := slices.ContainsFunc(pl.Compared, func(c ops.PerLoadCompared) bool { return strings.HasSuffix(c.Name, "_skip_zero_extend") })
		if !strings.Contains(details, "the proposal with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 at concurrency 64") ||
			without != compared || without != strings.Contains(details, "measured without it too") {
			t.Errorf("a slot holds only 0, but the table was not measured with the switch first (without it: %v, compared %v):\n%s\n%s", without, compared, details, ev.text())
		}
	}
	if env := strings.Contains(pl.Unit.After, "\nEnvironment=SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1\n"); env != pl.SkipZeroDraftExtend ||
		strings.HasSuffix(pl.Apply, " skip-zero-extend") != pl.SkipZeroDraftExtend {
		t.Errorf("switch proposed %v; in the unit %v; apply %q", pl.SkipZeroDraftExtend, env, pl.Apply)
	}
	// The proposal ran: started once more after the search, benchmarked at every concurrency.
	for _, c := range at {
		if !strings.Contains(ev.text(), fmt.Sprintf("proposal at %d: benchmark", c)) {
			t.Errorf("no benchmark of the proposal at %d:\n%s", c, ev.text())
		}
	}
	if !strings.Contains(ev.text(), "proposal: write unit") || res.Restarts < len(res.Tried)+1 {
		t.Errorf("%d restarts for %d values: the proposal's start and the way back are not counted", res.Restarts, len(res.Tried))
	}
	if len(res.Tried) >= pl.GridRestarts || pl.GridRestarts != 13 {
		t.Errorf("%d values tried, the full sweep %d: want fewer than 0..12's 13", len(res.Tried), pl.GridRestarts)
	}
	// A run at one concurrency ramps up and drains through smaller batches,
	// which the slots below it serve: its accept length is bounded by the
	// widest step in the file, not by its own slot's.
	widest := 0
	for _, row := range pl.Rows {
		widest = max(widest, maxOf(row.Candidates))
	}
	for _, row := range pl.Rows {
		if row.OutputTokS == nil || *row.OutputTokS <= 0 || row.GainPct == nil || row.NoSpecTokS == nil || row.NoSpecGainPct == nil {
			t.Errorf("row %+v: the proposal's own figures, or the comparison, are missing", row)
		}
		if row.AcceptRate > 1 || row.AcceptLen > float64(widest+1) || (row.AcceptLen < 1 && !math.IsNaN(row.AcceptLen)) {
			t.Errorf("row %+v: acceptance out of bounds", row)
		}
	}
	cfg, err := labengine.ParseAdaptiveConfig([]byte(pl.FileText))
	if err != nil {
		t.Fatalf("the lab's SGLang refuses the proposed file: %v\n%s", err, pl.FileText)
	}
	if !slices.Contains(cfg.CandidateSteps(), pl.Steps) || cfg.Slots[0].BatchSize != 1 {
		t.Errorf("file slots %+v, unit steps %d", cfg.Slots, pl.Steps)
	}
	if pl.File != file || pl.Unit == nil || !strings.Contains(pl.Unit.After, "--speculative-adaptive-config "+file) {
		t.Errorf("proposal file %q unit %+v", pl.File, pl.Unit)
	}
	if !strings.HasPrefix(res.Details[0], "Apply: `"+pl.Apply+"`") || !strings.HasPrefix(res.Details[1], "concurrency 1: ") ||
		!strings.Contains(res.Details[1], "over no speculation") || !strings.Contains(res.Summary, "started and measured") {
		t.Errorf("the first lines do not say the decision:\n%s\n%s", res.Summary, strings.Join(res.Details[:3], "\n"))
	}
	if after := r.unitText(t); after != before {
		t.Errorf("unit changed:\n%s", after)
	}
	if _, err := r.lab.Host("gpu1").ReadFile(file); err == nil {
		t.Errorf("the tune left %s behind; there was none before", file)
	}
	t.Logf("%s\n%s", res.Summary, strings.Join(res.Details, "\n"))
}

func maxOf(v []int) int { return slices.Max(v) }

// A configuration that does not start is not offered: 64 x 11 tokens of
// CUDA graphs with the cap raised to 64 run out of GPU memory on the lab, the
// start is rolled back and dropped saying why, and the configuration with
// SGLang's cap left alone (the slot at 64 dropped: the slot at 1 serves the
// loads above 48) is started instead and measured at every concurrency;
// every start counts.
func TestTunePerLoadFallsBackWhenTheProposalDoesNotStart(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
	})
	before := r.unitText(t)
	rows := []ops.PerLoadRow{{Concurrency: 1, Steps: 10, Candidates: []int{10}}, {Concurrency: 64, Steps: 10, Candidates: []int{10}}}
	ev := &events{}
	res, pl, err := r.rb.StartProposal(testkit.Context(t, 3*time.Minute), "qwen", rows, []int{1, 64}, ev)
	if err != nil {
		t.Fatalf("start proposal: %v\n%s", err, ev.text())
	}
	if len(pl.Dropped) != 1 || pl.Dropped[0].Table != "1:10 64:10" || !strings.Contains(pl.Dropped[0].Reason, "out of GPU memory") ||
		!strings.Contains(pl.Dropped[0].Change, "--max-running-requests 64") {
		t.Fatalf("dropped %+v\n%s", pl.Dropped, ev.text())
	}
	top := pl.Rows[1]
	if top.Slot != 1 || top.OutputTokS == nil || pl.Rows[0].OutputTokS == nil || top.Queued != 16 {
		t.Fatalf("rows after the fallback %+v", pl.Rows)
	}
	if res.Restarts != 3 || !slices.Contains(res.Incidents, ops.IncidentRolledBack) {
		t.Errorf("%d restarts (want 3: the start that failed, its rollback, the fallback), incidents %v", res.Restarts, res.Incidents)
	}
	unitNow := r.unitText(t)
	if strings.Contains(unitNow, "--max-running-requests") || !strings.Contains(unitNow, "--speculative-adaptive-config") || unitNow == before {
		t.Errorf("the unit serving the fallback:\n%s", unitNow)
	}
	pl.Apply = "mtp per-load qwen 1:10"
	t.Logf("%s", strings.Join(pl.Decision(), "\n"))
}

// With compare, SGLang's own default adaptive table is started and measured
// at the same concurrencies beside the proposal, and no speculation and the
// best single setting are the search's own measurements.
func TestTunePerLoadCompare(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
	})
	before := r.unitText(t)
	ev := &events{}
	res, err := r.rb.TunePerLoad(testkit.Context(t, 3*time.Minute), "qwen", ops.PerLoadOptions{At: []int{1, 64}, From: 2, To: 4, Compare: true}, ev)
	if err != nil {
		t.Fatalf("tune per load compare: %v\n%s", err, ev.text())
	}
	pl := res.PerLoad
	var names []string
	for _, c := range pl.Compared {
		if strings.HasSuffix(c.Name, "_skip_zero_extend") || c.Name == "compare_mix" || c.Name == "search_table" {
			continue // the table with the switch the other way (slot 64 holds only 0), or compare's mix when one was started
		}
		names = append(names, c.Name)
		for _, p := range c.Points {
			if p.OutputTokS == nil {
				t.Errorf("%s at %d not measured: %s", c.Name, p.Concurrency, p.Error)
			}
		}
	}
	if !slices.Equal(names, []string{"no_speculation", "best_single", "sglang_default"}) {
		t.Fatalf("compared %v", names)
	}
	if !strings.Contains(ev.text(), "compare: write unit") || !strings.Contains(ev.text(), "compare at 64: benchmark") ||
		!strings.Contains(ev.text(), "per load from default") {
		t.Errorf("the default table was not started and benchmarked:\n%s", ev.text())
	}
	if !slices.ContainsFunc(res.Details, func(l string) bool {
		return strings.HasPrefix(l, "Compared, at the same concurrencies: SGLang's default adaptive table")
	}) {
		t.Errorf("no comparison line:\n%s", strings.Join(res.Details, "\n"))
	}
	if r.unitText(t) != before {
		t.Errorf("unit changed:\n%s", r.unitText(t))
	}
}

// compare's guard: a proposal measured more than 3% below no speculation at
// 64 (here a figure set so) is not offered as is: the mix of the per-load
// best measured there (64: no speculation alone, with
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND, the known-safe side) is started
// through the pipeline and measured at every concurrency, and proposed
// because it measured better; the search's table is kept as compared, and
// the start counts.
func TestTunePerLoadCompareMix(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
	})
	v := func(x float64) *float64 { return &x }
	at := []int{1, 64}
	pl := &ops.PerLoad{Engine: "sglang", Single: 3, Rows: []ops.PerLoadRow{
		{Concurrency: 1, Steps: 3, Candidates: []int{3}, OutputTokS: v(1)},
		{Concurrency: 64, Steps: 3, Candidates: []int{3}, OutputTokS: v(1)},
	}, Compared: []ops.PerLoadCompared{
		{Name: "no_speculation", Points: []ops.PerLoadPoint{{Concurrency: 1, OutputTokS: v(1)}, {Concurrency: 64, OutputTokS: v(100)}}},
		{Name: "best_single", Points: []ops.PerLoadPoint{{Concurrency: 1, OutputTokS: v(1)}, {Concurrency: 64, OutputTokS: v(1)}}},
	}}
	ev := &events{}
	res, err := r.rb.MixIfBehind(testkit.Context(t, 3*time.Minute), "qwen", pl, at, ev)
	if err != nil {
		t.Fatalf("mix: %v\n%s", err, ev.text())
	}
	if !pl.Mixed || !strings.HasPrefix(pl.Mix, "Compare-driven mix: the search's table (`1:3 64:3`) measured more than 3% below what would run otherwise at 64 (-99.0% against no speculation)") ||
		!strings.Contains(pl.Mix, "the mix `1:3 64:0 skip-zero-extend`") {
		t.Fatalf("mixed %v: %s\n%s", pl.Mixed, pl.Mix, ev.text())
	}
	if !pl.SkipZeroDraftExtend || pl.Rows[1].Steps != 0 || pl.Rows[1].OutputTokS == nil || *pl.Rows[1].OutputTokS <= 1 {
		t.Errorf("rows %+v (switch %v): want 64:0 as measured with the switch", pl.Rows, pl.SkipZeroDraftExtend)
	}
	if !slices.ContainsFunc(pl.Compared, func(c ops.PerLoadCompared) bool { return c.Name == "search_table" }) || res.Restarts < 1 {
		t.Errorf("compared %+v, restarts %d", pl.Compared, res.Restarts)
	}
	if !strings.Contains(ev.text(), "mix at 64: benchmark") || !strings.Contains(r.unitText(t), "Environment=SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1") {
		t.Errorf("the mix was not started and measured:\n%s", ev.text())
	}
}

// On vLLM the proposal is the per-batch table, started and measured the
// same way; compare costs no start there: no speculation and the best
// single k are the search's own measurements.
func TestTunePerLoadVLLM(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, lab.Options{TimeScale: 1000, Engine: "vllm"}, func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
	})
	before := r.unitText(t)
	ev := &events{}
	res, err := r.rb.TunePerLoad(testkit.Context(t, 3*time.Minute), "qwen", ops.PerLoadOptions{At: []int{1, 64}, From: 2, To: 4, Compare: true}, ev)
	if err != nil {
		t.Fatalf("tune per load on vLLM: %v\n%s", err, ev.text())
	}
	pl := res.PerLoad
	if pl.Table == "" || len(pl.Compared) != 2 || strings.Contains(ev.text(), "compare: write unit") {
		t.Fatalf("table %q, compared %+v", pl.Table, pl.Compared)
	}
	// A run at one concurrency ramps up and drains through smaller batches,
	// which the slots below it serve: its accept length is bounded by the
	// widest step in the file, not by its own slot's.
	widest := 0
	for _, row := range pl.Rows {
		widest = max(widest, maxOf(row.Candidates))
	}
	for _, row := range pl.Rows {
		if row.OutputTokS == nil {
			t.Errorf("row %+v not measured", row)
		}
	}
	if !strings.Contains(ev.text(), "proposal at 64: benchmark") || r.unitText(t) != before {
		t.Errorf("the table was not measured, or the unit not left as found:\n%s", r.unitText(t))
	}
}

// The dry run says what it would measure and changes nothing.
func TestTunePerLoadDryRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), nil)
	before := r.unitText(t)
	res, err := r.rb.TunePerLoad(testkit.Context(t, 60*time.Second), "qwen", ops.PerLoadOptions{At: []int{1, 8, 32, 64}, From: 1, To: 12, Compare: true, DryRun: true}, ops.Discard)
	if err != nil || r.unitText(t) != before {
		t.Fatalf("dry run: %v", err)
	}
	for _, want := range []string{"would measure no speculative decoding", "start the per-load configuration", "SGLang's default adaptive table", "nothing is changed now",
		"max(bench.prompts, 4 x N) prompts", "the mix of the per-load best measured there"} {
		if !strings.Contains(res.Summary, want) {
			t.Errorf("dry run %q does not say %q", res.Summary, want)
		}
	}
}

// mtp per-load writes the adaptive file next to the unit and the unit's flags,
// the lab's SGLang runs it (verified on /server_info) and it is benchmarked at
// each concurrency; mtp undo puts back the unit and removes the file it
// created.
func TestApplyPerLoadAndUndo(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	h := &history{}
	r := newRig(t, labOpts(), func(c *ops.Config) { c.Changes = h })
	before := r.unitText(t)
	const file = "/etc/sglang/qwen-adaptive.json"
	rows := []ops.PerLoadRow{{Concurrency: 1, Steps: 7, Candidates: []int{7}}, {Concurrency: 8, Steps: 5, Candidates: []int{5}},
		{Concurrency: 64, Steps: 1, Candidates: []int{1, 2}}}

	dry, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", rows, true, ops.Discard)
	if err != nil || r.unitText(t) != before || !strings.Contains(strings.Join(dry.Details, "\n"), `+  "64": {"candidate_steps": [1, 2]}`) {
		t.Fatalf("dry run: %v\n%s", err, strings.Join(dry.Details, "\n"))
	}
	if _, err := r.lab.Host("gpu1").ReadFile(file); err == nil {
		t.Fatal("the dry run wrote the file")
	}

	ev := &events{}
	res, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", rows, false, ev)
	if err != nil {
		t.Fatalf("mtp per-load: %v\n%s", err, ev.text())
	}
	b, err := r.lab.Host("gpu1").ReadFile(file)
	if err != nil || string(b) != ops.SGLangAdaptiveConfig(rows) {
		t.Fatalf("file on the host: %v\n%s", err, b)
	}
	unitNow := r.unitText(t)
	if !strings.Contains(unitNow, "--speculative-adaptive \\") || !strings.Contains(unitNow, "--speculative-adaptive-config "+file) ||
		!strings.Contains(unitNow, "--speculative-num-steps 1 ") {
		t.Fatalf("unit:\n%s", unitNow)
	}
	// Its form is the table it wrote (results are compared by it), not the path.
	if res.Spec == nil || res.Spec.Adaptive != file || res.Spec.AdaptiveTable != ops.AdaptiveTableID(string(b)) || len(res.Points) != 3 ||
		!strings.Contains(ev.text(), "per load from "+file) {
		t.Fatalf("result spec %+v, %d points\n%s", res.Spec, len(res.Points), ev.text())
	}
	if len(res.Unit.Files) != 1 || !res.Unit.Files[0].Created {
		t.Fatalf("the change does not record the file it created: %+v", res.Unit.Files)
	}
	// Each load names what ran there: the steps the engine reported
	// choosing, else the slot's candidates it chose among; never the unit's
	// starting steps on every row. Each benchmark is one point, kept once.
	if res.Bench != nil {
		t.Errorf("the result keeps a benchmark apart from its points: %+v", res.Bench)
	}
	for i, p := range res.Points {
		row := rows[i]
		if p.PerLoad == nil || !slices.Equal(p.PerLoad.Among, row.Candidates) {
			t.Errorf("point %d: per load %+v, want the candidates %v", i, p.PerLoad, row.Candidates)
			continue
		}
		ran := p.Ran()
		line := res.Details[len(res.Details)-len(res.Points)+i]
		if !strings.HasPrefix(line, fmt.Sprintf("concurrency %d: %s; ", p.Concurrency, ran)) {
			t.Errorf("line %q does not say what ran at concurrency %d (%s)", line, p.Concurrency, ran)
		}
		// A run at one concurrency ramps up and drains through the smaller
		// batches, which the slots below it serve: what the engine chose
		// most there may be one of theirs.
		var servable []int
		for _, r := range rows[:i+1] {
			servable = append(servable, r.Candidates...)
		}
		chosen := len(p.PerLoad.Chosen) > 0 && slices.Contains(servable, p.PerLoad.Chosen[0].Steps)
		if !chosen && ran != "chosen by the engine among "+strings.Trim(strings.Join(strings.Fields(fmt.Sprint(sorted(row.Candidates))), "/"), "[]") &&
			ran != fmt.Sprintf("steps %d, the only candidate here", row.Steps) {
			t.Errorf("concurrency %d ran %q: want the engine's choice among %v, or those candidates", p.Concurrency, ran, row.Candidates)
		}
	}
	t.Logf("%s\n%s\n%s", res.Summary, strings.Join(res.Details, "\n"), ev.text())
	if show, err := r.rb.MTPShow(testkit.Context(t, 60*time.Second), "qwen", ops.Discard); err != nil || !strings.Contains(show.Summary, "per load from "+file+" (adaptive), launched with steps 1") {
		t.Errorf("mtp show: %v %+v", err, show)
	}
	h.add(ops.AppliedChange{JobID: 1, Command: "mtp per-load qwen 1:7 8:5 64:1/2", Status: "succeeded", Unit: *res.Unit})

	ev = &events{}
	if _, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ev); err != nil {
		t.Fatalf("mtp undo: %v\n%s", err, ev.text())
	}
	if r.unitText(t) != before {
		t.Fatalf("undo left the unit:\n%s", r.unitText(t))
	}
	if _, err := r.lab.Host("gpu1").ReadFile(file); err == nil {
		t.Fatal("undo left the adaptive file it should remove")
	}
}

// A per-load change that does not serve puts back both the unit and the file.
func TestApplyPerLoadRollsBackBoth(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(lab.Fault{Name: "crash-on-start"}), nil)
	before := r.unitText(t)
	const file = "/etc/sglang/qwen-adaptive.json"
	ev := &events{}
	res, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", []ops.PerLoadRow{{Concurrency: 1, Steps: 7, Candidates: []int{7}}, {Concurrency: 64, Steps: 1, Candidates: []int{1}}}, false, ev)
	if err == nil {
		t.Fatalf("a start that crashes succeeded:\n%s", ev.text())
	}
	if r.unitText(t) != before {
		t.Errorf("the unit is not put back:\n%s", r.unitText(t))
	}
	if _, err := r.lab.Host("gpu1").ReadFile(file); err == nil {
		t.Error("the adaptive file the failed change created is still there")
	}
	if res == nil || !slices.Contains(res.Incidents, ops.IncidentRolledBack) {
		t.Errorf("incidents %v, want rolled_back; err %v", res.Incidents, err)
	}
}

// On vLLM the per-load form is the per-batch table inside --speculative-config,
// edited byte-exactly, num_speculative_tokens its largest k; the engine runs
// it and mtp undo puts the unit back.
func TestApplyPerLoadVLLM(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	h := &history{}
	r := newRig(t, lab.Options{TimeScale: 1000, Engine: "vllm"}, func(c *ops.Config) { c.Changes = h })
	before := r.unitText(t)
	rows := []ops.PerLoadRow{{Concurrency: 1, Steps: 5, Candidates: []int{5}}, {Concurrency: 8, Steps: 3, Candidates: []int{3}},
		{Concurrency: 64, Steps: 0, Candidates: []int{0}}}
	ev := &events{}
	res, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", rows, false, ev)
	if err != nil {
		t.Fatalf("mtp per-load: %v\n%s", err, ev.text())
	}
	want := strings.Replace(before, `'{"method":"mtp","num_speculative_tokens":3}'`,
		`'{"method":"mtp","num_speculative_tokens":5,"num_speculative_tokens_per_batch_size":[[1,7,5],[8,63,3],[64,1024,0]]}'`, 1)
	if got := r.unitText(t); got != want || got == before {
		t.Fatalf("unit:\n%s\nwant:\n%s", got, want)
	}
	if res.Spec.BatchTable != "[[1,7,5],[8,63,3],[64,1024,0]]" || res.Spec.LiveSteps != 5 || len(res.Points) != 3 {
		t.Fatalf("spec %+v, %d points\n%s", res.Spec, len(res.Points), ev.text())
	}
	h.add(ops.AppliedChange{JobID: 1, Command: "mtp per-load qwen 1:5 8:3 64:0", Status: "succeeded", Unit: *res.Unit})
	if _, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ops.Discard); err != nil || r.unitText(t) != before {
		t.Fatalf("undo: %v\n%s", err, r.unitText(t))
	}
}

// mtp steps on a unit that runs per load takes it back to one setting: the
// adaptive flags go, and the engine runs the steps given.
func TestMTPStepsLeavesPerLoad(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), nil)
	before := r.unitText(t)
	rows := []ops.PerLoadRow{{Concurrency: 1, Steps: 7, Candidates: []int{7}}, {Concurrency: 8, Steps: 2, Candidates: []int{2}}}
	if _, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", rows, false, ops.Discard); err != nil {
		t.Fatalf("mtp per-load: %v", err)
	}
	ev := &events{}
	res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 5, false, ev)
	if err != nil {
		t.Fatalf("mtp steps 5: %v\n%s", err, ev.text())
	}
	want := strings.Replace(strings.Replace(before, "--speculative-num-steps 3 ", "--speculative-num-steps 5 ", 1),
		"--speculative-num-draft-tokens 4 ", "--speculative-num-draft-tokens 6 ", 1)
	if got := r.unitText(t); got != want {
		t.Fatalf("unit:\n%s\nwant:\n%s", got, want)
	}
	if res.Spec.Adaptive != "" || res.Spec.LiveSteps != 5 {
		t.Fatalf("spec %+v", res.Spec)
	}
}

// Applying a table whose slot at 64 keeps speculation on raises the cap: when
// the CUDA graphs it needs fit, the engine runs 64 at once and nothing
// queues; when they do not (the lab's memory model: graphs for batches up to
// the cap, each as wide as the largest candidate + 1), the unit and the file
// are rolled back and the error gives the command without the raise, which
// serves.
func TestApplyPerLoadRaisedCap(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
	})
	before := r.unitText(t)
	const file = "/etc/sglang/qwen-adaptive.json"

	// 64 x 11 tokens of graphs do not fit beside mem-fraction-static 0.88; 48 x 11 do.
	deep := []ops.PerLoadRow{{Concurrency: 1, Steps: 10, Candidates: []int{10}}, {Concurrency: 64, Steps: 10, Candidates: []int{10}}}
	ev := &events{}
	res, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", deep, false, ev)
	if err == nil {
		t.Fatalf("graphs for 64 x 11 tokens fit:\n%s", ev.text())
	}
	want := "The raised cap --max-running-requests 64 did not fit in GPU memory"
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "`mtp per-load qwen 1:10`") {
		t.Fatalf("error %q\nwant it to say %q and give `mtp per-load qwen 1:10`", err, want)
	}
	t.Logf("rolled back: %v", err)
	if res == nil || !slices.Contains(res.Incidents, ops.IncidentRolledBack) || r.unitText(t) != before {
		t.Fatalf("not rolled back: %+v\n%s", res, r.unitText(t))
	}
	if _, err := r.lab.Host("gpu1").ReadFile(file); err == nil {
		t.Fatal("the adaptive file the failed change created is still there")
	}
	if _, err := r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", deep[:1], false, ev); err != nil {
		t.Fatalf("the command the error gives fails: %v\n%s", err, ev.text())
	}

	shallow := []ops.PerLoadRow{{Concurrency: 1, Steps: 3, Candidates: []int{3}}, {Concurrency: 64, Steps: 3, Candidates: []int{3}}}
	ev = &events{}
	res, err = r.rb.ApplyPerLoad(testkit.Context(t, 60*time.Second), "qwen", shallow, false, ev)
	if err != nil {
		t.Fatalf("graphs for 64 x 4 tokens do not fit: %v\n%s", err, ev.text())
	}
	if !strings.Contains(r.unitText(t), "--max-running-requests 64") {
		t.Fatalf("unit:\n%s", r.unitText(t))
	}
	details := strings.Join(res.Details, "\n")
	if !strings.Contains(details, "no requests queued (the engine runs up to 64 at once)") || strings.Contains(details, "queued (the engine runs at most") {
		t.Errorf("the report at 64 does not say that no request queued:\n%s", details)
	}
}

// A per-load table re-applied with the same unit text changes only the
// adaptive file: the job history (a store, read as mtp undo reads it in the
// bot) still lists it, and mtp undo puts back the previous file, the unit as
// it is.
func TestUndoFileOnlyPerLoadChange(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	ctx := testkit.Context(t, 60*time.Second)
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := newRig(t, labOpts(), func(c *ops.Config) {
		c.Changes = storeChangeLog{st}
		c.Bench = ops.BenchDefaults{Prompts: 2, Concurrency: 1, InputLen: 16, OutputLen: 16}
	})
	const file = "/etc/sglang/qwen-adaptive.json"
	record := func(cmd string, res *ops.Result) {
		t.Helper()
		j, err := st.CreateJob(ctx, store.Job{Command: cmd, Service: "qwen", Status: store.Queued})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(res)
		if err == nil {
			err = st.StartJob(ctx, j.ID)
		}
		if err == nil {
			err = st.FinishJob(ctx, j.ID, store.Succeeded, "", b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	apply := func(rows []ops.PerLoadRow) {
		t.Helper()
		ev := &events{}
		res, err := r.rb.ApplyPerLoad(ctx, "qwen", rows, false, ev)
		if err != nil {
			t.Fatalf("mtp per-load: %v\n%s", err, ev.text())
		}
		record("mtp per-load qwen", res)
	}
	first := []ops.PerLoadRow{{Concurrency: 1, Steps: 5, Candidates: []int{5}}, {Concurrency: 8, Steps: 3, Candidates: []int{3}}}
	second := []ops.PerLoadRow{{Concurrency: 1, Steps: 5, Candidates: []int{5, 4}}, {Concurrency: 8, Steps: 3, Candidates: []int{3, 4}}}
	apply(first)
	unitFirst := r.unitText(t)
	apply(second)
	if r.unitText(t) != unitFirst {
		t.Fatalf("the second table changed the unit, not only the file:\n%s", r.unitText(t))
	}
	if b, err := r.lab.Host("gpu1").ReadFile(file); err != nil || string(b) != ops.SGLangAdaptiveConfig(second) {
		t.Fatalf("file after the second table: %v\n%s", err, b)
	}

	ev := &events{}
	if _, err := r.rb.MTPUndo(ctx, "qwen", false, ev); err != nil {
		t.Fatalf("mtp undo after a change of the file alone: %v\n%s", err, ev.text())
	}
	if b, err := r.lab.Host("gpu1").ReadFile(file); err != nil || string(b) != ops.SGLangAdaptiveConfig(first) {
		t.Fatalf("undo did not put back the first table's file: %v\n%s", err, b)
	}
	if r.unitText(t) != unitFirst {
		t.Fatalf("undo changed the unit:\n%s", r.unitText(t))
	}
}

// storeChangeLog reads the job history from a store as the bot's ChangeLog does (ops may not
// import bot, not even in tests): the jobs store.FinishedJobs lists whose unit change changed
// something (one page is enough for these tests).
type storeChangeLog struct{ st *store.Store }

func (c storeChangeLog) UnitChanges(ctx context.Context, service string, limit int) ([]ops.AppliedChange, error) {
	jobs, err := c.st.FinishedJobs(ctx, service, 0, 0)
	if err != nil {
		return nil, err
	}
	var out []ops.AppliedChange
	for _, j := range jobs {
		var res ops.Result
		if err := json.Unmarshal(j.Result, &res); err != nil {
			return nil, err
		}
		if (res.Unit.Changed() || res.Rollout.Changed()) && len(out) < limit {
			c := ops.AppliedChange{JobID: j.ID, Command: j.Command, Status: string(j.Status), Rollout: res.Rollout}
			if res.Unit != nil {
				c.Unit = *res.Unit
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// sorted is a sorted copy of v.
func sorted(v []int) []int {
	out := slices.Clone(v)
	slices.Sort(out)
	return out
}
