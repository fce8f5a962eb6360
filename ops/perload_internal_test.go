package ops

import (
	"math"
	"slices"
	"strings"
	"testing"

	labengine "github.com/opsbot/opsbot/lab/engine"
)

func TestPerLoadRowsAndForms(t *testing.T) {
	t.Parallel()
	at := []int{1, 8, 64}
	memo := map[int][]float64{
		2:  {200, 1500, 3000},
		5:  {250, 1600, 2950},
		9:  {280, 1580, 2500},
		10: {279, 1200, math.Inf(-1)}, // failed at 64
	}
	pl := perLoadRows(at, memo)
	if pl == nil || len(pl.Rows) != 3 {
		t.Fatalf("rows %+v", pl)
	}
	want := []struct {
		steps int
		cands []int
	}{{9, []int{9, 10}}, {5, []int{5, 9}}, {2, []int{2, 5}}}
	for i, w := range want {
		r := pl.Rows[i]
		if r.Steps != w.steps || len(r.Candidates) != len(w.cands) || r.Candidates[0] != w.cands[0] || r.Candidates[1] != w.cands[1] {
			t.Errorf("row %d: %+v, want steps %d candidates %v", i, r, w.steps, w.cands)
		}
	}
	// The best single setting: the highest mean of tok/s relative to each best (5 here);
	// no speculation was not measured: unknown, not 0.
	if pl.Single != 5 || *pl.Rows[0].SingleTokS != 250 || pl.Rows[0].StepsTokS != 280 || pl.Rows[0].NoSpecTokS != nil {
		t.Errorf("single %d, rows %+v", pl.Single, pl.Rows)
	}
	// The gains are the measured configuration's, once it ran.
	m := measuredAt(pl.Rows, []SweepPoint{{Concurrency: 1, OK: true, OutputTokS: 280}, {Concurrency: 8, Error: "boom"}, {Concurrency: 64, OK: true, OutputTokS: 2950}}, 48)
	if g := m[0].GainPct; g == nil || math.Abs(*g-12) > 1e-9 || m[1].OutputTokS != nil || m[1].GainPct != nil || m[1].MeasureError != "boom" || m[2].Queued != 16 {
		t.Errorf("measured rows %+v", m)
	}
	file := SGLangAdaptiveConfig(pl.Rows)
	wantFile := "{\n  \"1\": {\"candidate_steps\": [9, 10]},\n  \"8\": {\"candidate_steps\": [5, 9]},\n  \"64\": {\"candidate_steps\": [2, 5]}\n}\n"
	if file != wantFile {
		t.Errorf("file:\n%s\nwant:\n%s", file, wantFile)
	}
	cfg, err := labengine.ParseAdaptiveConfig([]byte(file))
	if err != nil || len(cfg.Slots) != 3 || cfg.Slots[2].BatchSize != 64 {
		t.Errorf("the lab's SGLang reads it as %+v, %v", cfg, err)
	}
	table, maxK := VLLMBatchTable(pl.Rows)
	if table != "[[1,7,9],[8,63,5],[64,1024,2]]" || maxK != 9 {
		t.Errorf("vLLM table %s max %d", table, maxK)
	}
	if perLoadRows(at, map[int][]float64{3: {1, 2, math.Inf(-1)}}) != nil {
		t.Error("a concurrency with no successful value gave rows")
	}
}

func TestQueuedNote(t *testing.T) {
	t.Parallel()
	if n := queuedNote([]int{1, 8, 48}); n != "" {
		t.Errorf("no concurrency above 48: %q", n)
	}
	want := "Requests queued: 16 of 64 at concurrency 64, 80 of 128 at concurrency 128. SGLang runs at most 48 requests at once with speculation on; " +
		"--max-running-requests 128 in the unit lets them all run, if the GPUs' memory allows it."
	if n := queuedNote([]int{1, 64, 128}); n != want {
		t.Errorf("note %q\nwant %q", n, want)
	}
}

// No speculation is a candidate: a row may hold 0 where it measured best,
// SGLang's file then has a slot [0] (no "strategy" key: SGLang's ema, which
// runs step 0) and vLLM's table a k of 0, the unit's steps a value above 0.
func TestPerLoadRowsWithZero(t *testing.T) {
	t.Parallel()
	at := []int{1, 8, 64}
	memo := map[int][]float64{
		0: {80, 600, 3200},
		1: {150, 1100, 3000},
		6: {270, 1500, 2000},
	}
	pl := perLoadRows(at, memo)
	if pl == nil || pl.Rows[2].Steps != 0 || *pl.Rows[2].NoSpecTokS != 3200 || *pl.Rows[0].NoSpecTokS != 80 {
		t.Fatalf("rows %+v", pl)
	}
	file := SGLangAdaptiveConfig(pl.Rows)
	if !strings.Contains(file, `"64": {"candidate_steps": [0]}`) || strings.Contains(file, "strategy") {
		t.Errorf("file:\n%s", file)
	}
	cfg, err := labengine.ParseAdaptiveConfig([]byte(file))
	if err != nil || !slices.Equal(cfg.Slots[2].CandidateSteps, []int{0}) {
		t.Errorf("the lab's SGLang reads it as %+v, %v", cfg, err)
	}
	if table, maxK := VLLMBatchTable(pl.Rows); table != "[[1,7,6],[8,63,6],[64,1024,0]]" || maxK != 6 {
		t.Errorf("vLLM table %s max %d", table, maxK)
	}
	if n := startSteps("sglang", pl.Rows); n != 6 {
		t.Errorf("SGLang starts at %d, want 6", n)
	}
	zero := []PerLoadRow{{Concurrency: 1, Steps: 0, Candidates: []int{0, 3}}, {Concurrency: 8, Steps: 0, Candidates: []int{0}}}
	if n := startSteps("sglang", zero); n != 3 {
		t.Errorf("a first slot [0, 3] starts at %d, want 3", n)
	}
	deep := []PerLoadRow{{Concurrency: 1, Steps: 10, Candidates: []int{10, 9, 11}}, {Concurrency: 32, Steps: 1, Candidates: []int{1}}, {Concurrency: 64, Candidates: []int{0}}}
	if n := startSteps("sglang", deep); n != 1 {
		t.Errorf("1:10/9/11 32:1 64:0 starts at %d, want the shallowest candidate above 0, 1", n)
	}
	if n := startSteps("vllm", deep); n != 11 {
		t.Errorf("vLLM's num_speculative_tokens %d, want the largest k, 11", n)
	}
	if err := checkRows([]PerLoadRow{{Concurrency: 1, Candidates: []int{0}}, {Concurrency: 8, Candidates: []int{0}}}); err == nil || !strings.Contains(err.Error(), "`mtp steps 0`") {
		t.Errorf("a table of zeros: %v", err)
	}
}

// The tries a per-load tune starts in turn: the proposal, then (SGLang,
// raising the cap) the cap left alone with the slots above 48 served by the
// slot below, then each slot at its best steps alone; vLLM only the first.
func TestPerLoadTries(t *testing.T) {
	t.Parallel()
	rows := []PerLoadRow{{Concurrency: 1, Steps: 11, Candidates: []int{11, 10, 9}}, {Concurrency: 8, Steps: 6, Candidates: []int{6, 7}},
		{Concurrency: 32, Steps: 1, Candidates: []int{1}}, {Concurrency: 64, Steps: 3, Candidates: []int{3, 2}}}
	tries := perLoadTries("sglang", rows, false)
	words := make([]string, len(tries))
	for i, try := range tries {
		words[i] = perLoadWords(try.rows)
	}
	want := []string{"1:11/10/9 8:6/7 32:1 64:3/2", "1:11/10/9 8:6/7 32:1", "1:11 8:6 32:1"}
	if !slices.Equal(words, want) {
		t.Fatalf("tries %q, want %q", words, want)
	}
	if r := tries[1].rows[3]; r.Slot != 32 || r.Steps != 1 || capNeeded(tries[1].rows) != 0 || capNeeded(rows) != 64 {
		t.Errorf("the row at 64 without the cap: %+v; caps %d, %d", r, capNeeded(tries[1].rows), capNeeded(rows))
	}
	if !strings.Contains(tries[1].change, "--max-running-requests 64") {
		t.Errorf("change %q", tries[1].change)
	}
	// A slot of 0 above 48 still needs the raise: without it no batch reaches
	// the slot, and the requests above 48 queue.
	off := slices.Clone(rows)
	off[3] = PerLoadRow{Concurrency: 64, Steps: 0, Candidates: []int{0}}
	if tries := perLoadTries("sglang", off, false); len(tries) != 3 || capNeeded(off) != 64 || capNeeded(off[:3]) != 0 {
		t.Errorf("%d tries, cap %d for a table without speculation above 48", len(tries), capNeeded(off))
	}
	if tries := perLoadTries("sglang", rows, true); len(tries) != 2 {
		t.Errorf("a unit that sets the cap: %d tries, want 2", len(tries))
	}
	if tries := perLoadTries("vllm", rows, false); len(tries) != 1 {
		t.Errorf("vLLM: %d tries, want 1", len(tries))
	}
}

// A per-load tune measures, between two loads asked more than twice apart, their
// geometric mean rounded to a CUDA-graph batch size: SGLang pads a batch up to a graph
// size and takes the largest slot key at or below it, so without them every load up to
// the next key runs the steps measured at a much smaller batch (16 on slot 8's).
func TestBetweenLoads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ at, want []int }{
		{[]int{1, 8, 32, 64}, []int{4, 16, 48}},
		{[]int{1, 2, 3}, nil},
		{[]int{1, 64}, []int{8}},
		{[]int{8, 128}, []int{32}},
		{[]int{2, 5}, []int{4}},
	} {
		if got := betweenLoads(c.at); !slices.Equal(got, c.want) {
			t.Errorf("betweenLoads(%v) = %v, want %v", c.at, got, c.want)
		}
	}
}
