package ops

import "math"

// bestOf is the steps value measured fastest at concurrency index ci of a
// per-load search's figures (memo: tok/s by steps, -Inf where it failed),
// the fewest steps of equal ones, and its tok/s (-Inf: none served there).
// It is BestAt's choice over the same figures: the search's trace, its
// rows (the table and the proposal) and the chart all read this one
// decision.
func bestOf(memo map[int][]float64, ci int) (steps int, tokS float64) {
	tokS = math.Inf(-1)
	for n, v := range memo {
		if v[ci] > tokS || (v[ci] == tokS && n < steps) {
			steps, tokS = n, v[ci]
		}
	}
	return steps, tokS
}
