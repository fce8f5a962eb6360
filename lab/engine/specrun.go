package engine

// specRun is how an engine speculates at each batch size: one static shape, SGLang's
// adaptive slots, or vLLM's per-batch table. Only the scheduler goroutine uses it.
type specRun struct {
	static    Shape
	levels    []float64   // of static
	chains    [][]float64 // levels of Chain(k), k = 0..max (adaptive and table)
	router    *adaptiveRouter
	table     []BatchK
	maxK      int // vLLM num_speculative_tokens
	maxLevels int // the most levels any step can accept
}

// stepPlan is one verify step's shape, its per-level acceptance, and the adaptive slot to
// feed (nil = none).
type stepPlan struct {
	shape  Shape
	levels []float64
	slot   *slotState
}

func newSpecRun(s Settings, p Physics) specRun {
	r := specRun{static: settingsShape(s)}
	r.levels = p.Levels(r.static)
	r.maxLevels = len(r.levels)
	maxChain := 0
	switch {
	case !s.Speculative():
	case s.Flavor == "sglang" && s.Adaptive != nil:
		r.router = newAdaptiveRouter(s.Adaptive, s.Steps, max(s.CudaGraphMaxBS, 1))
		maxChain = s.Adaptive.CandidateSteps()[len(s.Adaptive.CandidateSteps())-1]
	case s.Flavor == "vllm" && len(s.BatchTable) > 0:
		r.table, r.maxK = s.BatchTable, s.Steps
		maxChain = s.Steps
	}
	if r.router != nil || r.table != nil {
		r.chains = make([][]float64, maxChain+1)
		for k := range r.chains {
			r.chains[k] = p.Levels(Chain(k))
		}
		r.maxLevels = max(r.maxLevels, maxChain)
	}
	return r
}

// plan is the shape a decode step over n running streams runs with.
func (r *specRun) plan(n int) stepPlan {
	switch {
	case r.router != nil:
		sl := r.router.slot(n)
		return stepPlan{shape: Chain(sl.current), levels: r.chains[sl.current], slot: sl}
	case r.table != nil:
		k := kFor(r.table, n, r.maxK)
		return stepPlan{shape: Chain(k), levels: r.chains[k]}
	}
	return stepPlan{shape: r.static, levels: r.levels}
}
