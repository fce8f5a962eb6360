package engine

import "slices"

// The "ema" strategy's controller of one slot, as AdaptiveStepSlot at sgl-project/sglang
// commit 015c8726 (python/sglang/srt/speculative/adaptive_spec_params.py): an EMA of the
// accepted drafts per request, recomputed every update_interval batches after
// warmup_batches; it steps down past a candidate when the EMA is at most that candidate -
// 0.5 (0.5 for candidate 0) plus down_hysteresis, up past one when above it - 0.5 plus
// up_hysteresis; a slot at 0 probes its next candidate; ceiling_coeff > 0 caps a step that
// is not a rise at max(1, ceil(ema x ceiling_coeff)).

// slotState is one slot's controller at run time (AdaptiveStepSlot).
type slotState struct {
	cfg     AdaptiveSlot
	current int
	ema     float64
	batches int
}

func newSlotState(c AdaptiveSlot, initial int) *slotState {
	st := &slotState{cfg: c, current: c.CandidateSteps[len(c.CandidateSteps)/2]}
	if slices.Contains(c.CandidateSteps, initial) {
		st.current = initial
	}
	st.ema = float64(st.current - 1)
	return st
}

// update feeds one verify's accepted drafts per request; it returns the old and new steps
// when the slot moved.
func (st *slotState) update(correct []int) (from, to int, moved bool) {
	if len(correct) == 0 {
		return 0, 0, false
	}
	if st.current > 0 {
		sum := 0
		for _, c := range correct {
			sum += c
		}
		st.ema = (1-st.cfg.EMAAlpha)*st.ema + st.cfg.EMAAlpha*float64(sum)/float64(len(correct))
	}
	st.batches++
	if st.batches <= st.cfg.WarmupBatches || (st.batches-st.cfg.WarmupBatches)%st.cfg.UpdateInterval != 0 {
		return 0, 0, false
	}
	return st.recompute()
}

func (st *slotState) recompute() (int, int, bool) {
	cand := st.cfg.CandidateSteps
	old := st.current
	idx := slices.Index(cand, old)
	if old == 0 {
		idx = min(idx+1, len(cand)-1)
		if t := cand[idx]; t > 0 && st.ema < 0 {
			st.ema = float64(t - 1)
		}
		return st.apply(old, cand[idx])
	}
	oldIdx := idx
	for idx > 0 {
		prev := cand[idx-1]
		drop := float64(prev) - 0.5
		if prev == 0 {
			drop = 0.5
		}
		if st.ema <= drop+st.cfg.DownHysteresis {
			idx--
		} else {
			break
		}
	}
	if idx >= oldIdx {
		for idx < len(cand)-1 && st.ema > float64(cand[idx])-0.5+st.cfg.UpHysteresis {
			idx++
		}
	}
	target := cand[idx]
	if st.cfg.CeilingCoeff > 0 {
		ceiling := max(1, int(ceilF(st.ema*st.cfg.CeilingCoeff)))
		if target > ceiling && target <= old {
			for idx > 0 && cand[idx] > ceiling {
				idx--
			}
			target = cand[idx]
		}
	}
	return st.apply(old, target)
}

func (st *slotState) apply(old, target int) (int, int, bool) {
	if target == old {
		return old, old, false
	}
	st.current = target
	return old, target, true
}

func ceilF(f float64) float64 {
	i := float64(int(f))
	if f > i {
		return i + 1
	}
	return i
}
