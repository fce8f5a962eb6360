package engine

import (
	"fmt"
	"slices"
)

// SGLang's adaptive speculation at run time, as of sgl-project/sglang commit 015c8726. Each
// decode batch activates the steps its policy gives for the batch size
// (EAGLEWorkerV2.activate_step_by_batch), and the verify's accepted drafts go back to it
// (on_verify_complete). The batch size picks a slot through AdaptiveStepRouter
// (python/sglang/srt/speculative/adaptive_step_router.py, batch_size_key_for_batch).

// batchSizeKey is batch_size_key_for_batch: the live batch size n is padded up to the next
// captured CUDA-graph batch size (none above n, or graphs off: n itself), then the slot is
// the largest key at or below it; below every key, the smallest. Keys are lower bounds: with
// graph sizes 4 and 8 a batch of 5 pads to 8 and runs slot "8".
func batchSizeKey(keys, graphBS []int, n int) int {
	if i, _ := slices.BinarySearch(graphBS, n); i < len(graphBS) {
		n = graphBS[i]
	}
	k := keys[0]
	for _, key := range keys {
		if key <= n {
			k = key
		}
	}
	return k
}

// cudaGraphBSForStep is cuda_graph_bs_for_step: the captured graph batch sizes whose slot
// lists step, the only sizes SGLang captures that step's graphs at.
func cudaGraphBSForStep(cfg *AdaptiveConfig, graphBS []int, step int) []int {
	keys := cfg.keys()
	out := []int{}
	for _, b := range graphBS {
		if slices.Contains(cfg.candidatesAt(batchSizeKey(keys, graphBS, b)), step) {
			out = append(out, b)
		}
	}
	return out
}

// stepPolicy chooses the steps of each decode batch and learns from its verify: SGLang's
// AdaptiveSpecPolicy (get_steps_for_batch, on_verify_complete). Only the scheduler uses it.
type stepPolicy interface {
	stepsFor(n int) int
	// verified feeds the drafts each request of a batch of n accepted; it returns SGLang's
	// log line (without its prefix) when the policy moved, else "".
	verified(n int, correct []int) string
}

func newStepPolicy(c *AdaptiveConfig, initial int, graphBS []int, p Physics) stepPolicy {
	if c.Strategy == StrategyThroughputAware {
		return newThroughputPolicy(c, initial, graphBS, p)
	}
	e := &emaPolicy{keys: c.keys(), graphBS: graphBS, slots: map[int]*slotState{}}
	for _, s := range c.Slots {
		e.slots[s.BatchSize] = newSlotState(s, initial)
	}
	return e
}

// emaPolicy is AdaptiveSpeculativeParams: one EMA slot per batch-size key.
type emaPolicy struct {
	keys, graphBS []int
	slots         map[int]*slotState
}

func (e *emaPolicy) slot(n int) *slotState { return e.slots[batchSizeKey(e.keys, e.graphBS, n)] }

func (e *emaPolicy) stepsFor(n int) int { return e.slot(n).current }

func (e *emaPolicy) verified(n int, correct []int) string {
	sl := e.slot(n)
	from, to, moved := sl.update(correct)
	if !moved {
		return ""
	}
	return fmt.Sprintf("Adaptive spec params updated: steps %d -> %d (ema_accept_len=%.2f)", from, to, sl.ema)
}

// throughputPolicy is ThroughputAwarePolicy (throughput_aware_controller.py): it scores
// each candidate of the batch's slot as expected tokens per step over the step's cost and
// runs the best. SGLang estimates the acceptance per draft position over a sliding window
// and profiles the cost at start for each step at its captured graph sizes; the lab scores
// with its physics, the values those estimates converge to, once window verifies were seen
// at the current steps, and only where graphs were captured (no graphs: no cost table, and
// SGLang keeps each slot's middle candidate). A batch whose slot does not list the current
// steps switches at once; otherwise it re-scores every update_interval batches and switches
// only for a score above the current one by switch_hysteresis.
type throughputPolicy struct {
	cfg                *AdaptiveConfig
	keys, graphBS      []int
	phys               Physics
	current, seen, due int
}

func newThroughputPolicy(c *AdaptiveConfig, initial int, graphBS []int, p Physics) *throughputPolicy {
	t := &throughputPolicy{cfg: c, keys: c.keys(), graphBS: graphBS, phys: p, current: initial}
	if !slices.Contains(c.CandidateSteps(), initial) {
		first := c.Slots[0].CandidateSteps
		t.current = first[len(first)/2]
	}
	return t
}

func (t *throughputPolicy) stepsFor(n int) int {
	cand := t.cfg.candidatesAt(batchSizeKey(t.keys, t.graphBS, n))
	if !slices.Contains(cand, t.current) {
		next := cand[len(cand)/2]
		if t.warm() {
			next = t.best(cand, n)
		}
		t.current, t.seen = next, 0
	}
	if t.due >= t.cfg.UpdateInterval {
		t.due = 0
		if t.warm() {
			if b := t.best(cand, n); t.score(b, n) > t.score(t.current, n)*(1+t.cfg.SwitchHysteresis) {
				t.current, t.seen = b, 0
			}
		}
	}
	return t.current
}

func (t *throughputPolicy) verified(n int, correct []int) string {
	if len(correct) > 0 {
		t.seen++
		t.due++
	}
	return ""
}

func (t *throughputPolicy) warm() bool { return t.graphBS != nil && t.seen >= t.cfg.WindowSize }

func (t *throughputPolicy) best(cand []int, n int) int {
	b := cand[0]
	for _, c := range cand[1:] {
		if t.score(c, n) > t.score(b, n) {
			b = c
		}
	}
	return b
}

// score is expected tokens per second of one request at steps k in a batch of n.
func (t *throughputPolicy) score(k, n int) float64 { return t.phys.StreamTokS(Chain(k), n) }
