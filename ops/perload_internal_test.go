package ops

import (
	"math"
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
	pl := perLoadRows(at, memo, nil)
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
	// The best single setting: the highest mean of tok/s relative to each best (5 here).
	if pl.Single != 5 || math.Abs(pl.Rows[0].GainPct-12) > 1e-9 || pl.Rows[1].GainPct != 0 {
		t.Errorf("single %d, gains %+v", pl.Single, pl.Rows)
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
	if perLoadRows(at, map[int][]float64{3: {1, 2, math.Inf(-1)}}, nil) != nil {
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
