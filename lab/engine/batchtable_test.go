package engine

import (
	"slices"
	"strings"
	"testing"
)

// The per-batch-size table resolves as vLLM's build_dynamic_sd_schedule_lookup does (its own
// tests' cases): a gap runs the K before it, the tail the last K, every K clamped to
// num_speculative_tokens, K 0 kept.
func TestVLLMTableLookupMatchesVLLM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		table     []BatchK
		maxBS, k  int
		want      []int
		wantIndex map[int]int
	}{
		{table: []BatchK{{1, 2, 4}, {5, 8, 1}}, maxBS: 10, k: 4, want: []int{0, 4, 4, 4, 4, 1, 1, 1, 1, 1, 1}},
		{table: []BatchK{{1, 4, 5}}, maxBS: 4, k: 3, want: []int{0, 3, 3, 3, 3}},
		{table: []BatchK{{1, 16, 3}, {32, 128, 2}}, maxBS: 128, k: 8, wantIndex: map[int]int{16: 3, 17: 3, 31: 3, 32: 2, 128: 2}},
		{table: []BatchK{{1, 1, 3}, {2, 64, 0}}, maxBS: 64, k: 3, wantIndex: map[int]int{1: 3, 2: 0, 64: 0}},
	} {
		got := denseLookup(tc.table, tc.maxBS, tc.k)
		if tc.want != nil && !slices.Equal(got, tc.want) {
			t.Errorf("%v up to %d, K %d: %v, want %v", tc.table, tc.maxBS, tc.k, got, tc.want)
		}
		for n, k := range tc.wantIndex {
			if got[n] != k {
				t.Errorf("%v: batch %d runs K %d, want %d", tc.table, n, got[n], k)
			}
		}
	}
}

// vLLM accepts K 0 in the table and refuses what its Scheduler refuses, with its text, when
// the engine core starts; an empty table is no table.
func TestVLLMTableChecks(t *testing.T) {
	t.Parallel()
	check := func(table string) (Settings, error) {
		s, _, err := Check(mustParse(t, []string{"/opt/vllm/.venv/bin/vllm", "serve", "/models/q", "--speculative-config",
			`{"method":"mtp","num_speculative_tokens":3,"num_speculative_tokens_per_batch_size":` + table + `}`}))
		return s, err
	}
	if s, err := check("[[1,7,3],[8,63,1],[64,1024,0]]"); err != nil || len(s.BatchTable) != 3 || s.BatchTable[2].K != 0 {
		t.Fatalf("K 0 at 64: %v, table %+v", err, s.BatchTable)
	}
	if s, err := check("[]"); err != nil || s.BatchTable != nil {
		t.Fatalf("empty table: %v, table %+v", err, s.BatchTable)
	}
	for table, want := range map[string]string{
		"[[2,8,1]]":          "ValueError: The first batch-size range must start at 1 so every runtime batch size has a defined schedule.",
		"[[1,8,-1]]":         "ValueError: num_speculative_tokens_per_batch_size values must be >= 0.",
		"[[1,8,3],[4,16,1]]": "ValueError: Batch-size ranges must be non-overlapping and sorted.",
		"[[8,1,3]]":          "ValueError: Batch-size range start must be <= end for (8, 1, 3).",
		"[[0,4,3]]":          "ValueError: Batch-size range (0, 4) must be positive.",
	} {
		_, err := check(table)
		se, ok := err.(*StartError)
		if !ok || !slices.Contains(se.Lines, want) || !strings.Contains(se.Lines[0], "EngineCore failed to start.") {
			t.Errorf("table %s: %v, want the engine core to fail with %q", table, err, want)
		}
	}
}

// vLLM's K 0 decodes without drafting at the batch sizes it covers.
func TestVLLMTableKZeroDoesNotDraft(t *testing.T) {
	t.Parallel()
	te := startEngine(t, []string{"/opt/vllm/.venv/bin/vllm", "serve", "/models/q", "--speculative-config",
		`{"method":"mtp","num_speculative_tokens":3,"num_speculative_tokens_per_batch_size":[[1,1,3],[2,1024,0]]}`}, fastPhysics())
	t0 := te.e.Truth()
	runConcurrent(t, te.url, 8, func(int) string {
		return `{"prompt":"a","max_tokens":300,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	})
	t1 := te.e.Truth()
	if share := float64(t1.DraftSteps-t0.DraftSteps) / float64(t1.VerifySteps-t0.VerifySteps); share > 0.2 {
		t.Fatalf("8 streams under K 0: %.0f%% of the verify steps drafted", 100*share)
	}
	oneStream(t, te.url, 200)
	if d := draftsPerStep(t1, te.e.Truth()); d != 3 {
		t.Fatalf("one stream: %.2f draft tokens per drafting step, want 3", d)
	}
}
