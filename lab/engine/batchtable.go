package engine

import (
	"fmt"
	"slices"
)

// BatchK is one entry of vLLM's "num_speculative_tokens_per_batch_size" inside
// --speculative-config: K draft tokens for batch sizes Lo..Hi (vllm-project/vllm
// vllm/config/speculative.py and v1/spec_decode/dynamic). At run time K is clamped to
// num_speculative_tokens (the CUDA graphs are captured for that depth), K 0 decodes without
// drafting, and a batch size no entry covers runs num_speculative_tokens.
type BatchK struct{ Lo, Hi, K int }

// parseBatchTable validates the JSON value of num_speculative_tokens_per_batch_size: a list
// of [lo, hi, k] integer triples, 1 <= lo <= hi, k >= 0, ranges not overlapping.
func parseBatchTable(raw any) ([]BatchK, error) {
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("want a list of [min_batch_size, max_batch_size, num_speculative_tokens] entries, got %v", raw)
	}
	var out []BatchK
	for i, e := range list {
		tr, ok := e.([]any)
		if !ok || len(tr) != 3 {
			return nil, fmt.Errorf("entry %d must be [min_batch_size, max_batch_size, num_speculative_tokens], got %v", i, e)
		}
		var v [3]int
		for j, x := range tr {
			f, ok := x.(float64)
			if !ok || f != float64(int(f)) {
				return nil, fmt.Errorf("entry %d: %v is not an integer", i, x)
			}
			v[j] = int(f)
		}
		if v[0] < 1 || v[1] < v[0] || v[2] < 0 {
			return nil, fmt.Errorf("entry %d %v: want 1 <= min_batch_size <= max_batch_size and num_speculative_tokens >= 0", i, v)
		}
		out = append(out, BatchK{Lo: v[0], Hi: v[1], K: v[2]})
	}
	slices.SortFunc(out, func(a, b BatchK) int { return a.Lo - b.Lo })
	for i := 1; i < len(out); i++ {
		if out[i].Lo <= out[i-1].Hi {
			return nil, fmt.Errorf("batch size ranges [%d, %d] and [%d, %d] overlap", out[i-1].Lo, out[i-1].Hi, out[i].Lo, out[i].Hi)
		}
	}
	return out, nil
}

// kFor is the draft tokens a batch of n runs with under table t and num_speculative_tokens max.
func kFor(t []BatchK, n, maxK int) int {
	for _, e := range t {
		if n >= e.Lo && n <= e.Hi {
			return min(e.K, maxK)
		}
	}
	return maxK
}
