package engine

import (
	"slices"
)

// BatchK is one entry of vLLM's "num_speculative_tokens_per_batch_size" inside
// --speculative-config: K draft tokens for batch sizes Lo..Hi (inclusive). As vLLM reads it
// (vllm-project/vllm vllm/config/speculative.py, a list[tuple[int, int, int]] validated by
// pydantic when the config is built; vllm/v1/spec_decode/dynamic/utils.py at a6f6bb1d,
// validate_and_normalize_dynamic_sd_schedule and build_dynamic_sd_schedule_lookup, which the
// v1 Scheduler calls when the engine core starts): K may be 0 (the check is "values must be
// >= 0"): that batch size decodes without drafting. Every range is positive with start <=
// end, ranges do not overlap, the first starts at 1; a gap between ranges runs the K before
// it, batch sizes past the last range run the last K, and every K is clamped to
// num_speculative_tokens. An empty list is no table at all (the Scheduler builds the lookup
// only for a non-empty one).
type BatchK struct{ Lo, Hi, K int }

// parseBatchTable reads the JSON value of num_speculative_tokens_per_batch_size as pydantic
// does: a list of [lo, hi, k] integer triples. The ranges are checked by checkBatchTable.
func parseBatchTable(raw any) ([]BatchK, error) {
	list, ok := raw.([]any)
	if !ok {
		return nil, pyErrorf("  Input should be a valid list [type=list_type, input_value=%v, input_type=%T]", raw, raw)
	}
	var out []BatchK
	for i, e := range list {
		tr, ok := e.([]any)
		if !ok || len(tr) != 3 {
			return nil, pyErrorf("  Entry %d should be a tuple of 3 integers [type=tuple_type, input_value=%v]", i, e)
		}
		var v [3]int
		for j, x := range tr {
			f, ok := x.(float64)
			if !ok || f != float64(int(f)) {
				return nil, pyErrorf("  Input should be a valid integer [type=int_type, input_value=%v]", x)
			}
			v[j] = int(f)
		}
		out = append(out, BatchK{Lo: v[0], Hi: v[1], K: v[2]})
	}
	return out, nil
}

// checkBatchTable is validate_and_normalize_dynamic_sd_schedule: the entries sorted by start,
// or vLLM's ValueError text.
func checkBatchTable(t []BatchK) ([]BatchK, error) {
	for _, e := range t {
		switch {
		case e.Lo <= 0 || e.Hi <= 0:
			return nil, pyErrorf("Batch-size range (%d, %d) must be positive.", e.Lo, e.Hi)
		case e.Lo > e.Hi:
			return nil, pyErrorf("Batch-size range start must be <= end for (%d, %d, %d).", e.Lo, e.Hi, e.K)
		case e.K < 0:
			return nil, pyErrorf("num_speculative_tokens_per_batch_size values must be >= 0.")
		}
	}
	t = slices.Clone(t)
	slices.SortStableFunc(t, func(a, b BatchK) int { return a.Lo - b.Lo })
	end := 0
	for _, e := range t {
		if e.Lo <= end {
			return nil, pyErrorf("Batch-size ranges must be non-overlapping and sorted.")
		}
		end = e.Hi
	}
	if t[0].Lo != 1 {
		return nil, pyErrorf("The first batch-size range must start at 1 so every runtime batch size has a defined schedule.")
	}
	return t, nil
}

// denseLookup is build_dynamic_sd_schedule_lookup: the K of each batch size 1..maxBS (index 0
// unused) under the checked table t and num_speculative_tokens maxK.
func denseLookup(t []BatchK, maxBS, maxK int) []int {
	dense := make([]int, maxBS+1)
	next, last := 1, -1
	for _, e := range t {
		if e.Lo > next && last >= 0 {
			for b := next; b < min(e.Lo, maxBS+1); b++ {
				dense[b] = min(maxK, last)
			}
		}
		for b := max(e.Lo, next); b <= min(e.Hi, maxBS); b++ {
			dense[b] = min(maxK, e.K)
		}
		next, last = max(next, e.Hi+1), e.K
		if next > maxBS {
			break
		}
	}
	for b := next; b <= maxBS; b++ {
		dense[b] = min(maxK, last)
	}
	return dense
}
