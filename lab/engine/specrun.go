package engine

// specRun is how an engine speculates at each batch size: one static shape, SGLang's
// adaptive policy, or vLLM's per-batch table. Only the scheduler goroutine uses it.
type specRun struct {
	static    Shape
	levels    []float64   // of static
	chains    [][]float64 // levels of Chain(k), k = 0..max (adaptive and table)
	policy    stepPolicy  // SGLang adaptive (nil = none)
	table     []int       // vLLM: K by batch size, index 0 unused (nil = none)
	cold      [][]float64 // of Chain(k) from a cold draft state (adaptive with skipZero)
	maxLevels int         // the most levels any step can accept
	graphMax  int         // largest batch size with captured CUDA graphs (0 = none)
	// skipZero is SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND with adaptive steps: step 0
	// skips the draft extend (no draft pass), and a stream drafting again is cold.
	skipZero bool
}

// stepPlan is one verify step's shape, its per-level acceptance, and the batch size it was
// planned for (the adaptive policy learns from its verify). With skipZero, a step 0 leaves each
// stream's draft state stale, and a step above 0 drafts for a stale or cooling stream with
// cold (see Physics.ColdSteps).
type stepPlan struct {
	shape    Shape
	levels   []float64
	cold     []float64
	batch    int
	skipZero bool
}

func newSpecRun(s Settings, p Physics) specRun {
	r := specRun{static: settingsShape(s)}
	r.levels = p.Levels(r.static)
	r.maxLevels = len(r.levels)
	if bs := s.graphBatchSizes(); len(bs) > 0 && s.Flavor == "sglang" {
		r.graphMax = bs[len(bs)-1]
	} else if s.Flavor == "vllm" {
		r.graphMax = s.CudaGraphMaxBS
	}
	maxChain := 0
	switch {
	case !s.Speculative():
	case s.Flavor == "sglang" && s.Adaptive != nil:
		r.policy = newStepPolicy(s.Adaptive, s.Steps, s.graphBatchSizes(), p)
		c := s.Adaptive.CandidateSteps()
		maxChain = c[len(c)-1]
	case s.Flavor == "vllm" && len(s.BatchTable) > 0:
		r.table = denseLookup(s.BatchTable, max(s.MaxRunningRequests, 1), s.Steps)
		maxChain = s.Steps
	}
	if r.policy != nil || r.table != nil {
		r.chains = make([][]float64, maxChain+1)
		r.cold = make([][]float64, maxChain+1)
		for k := range r.chains {
			r.chains[k] = p.Levels(Chain(k))
			r.cold[k] = p.ColdLevels(r.chains[k])
		}
		r.skipZero = r.policy != nil && s.SkipZeroDraftExtend
		r.maxLevels = max(r.maxLevels, maxChain)
	}
	return r
}

// plan is the shape a decode step over n running streams runs with. SGLang's adaptive step
// 0 verifies one token without drafting, and its draft model still extends over the
// verified token (EAGLEWorkerV2.forward_batch_generation: "Drafting disabled ...
// _draft_extend below still runs, keeping draft KV warm"): a KeepDraft shape. With
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND (skipZero) step 0 stubs the draft extend instead
// (_stub_skipped_draft_extend): no draft pass, and the draft state goes stale. vLLM's K 0
// is a plain decode step.
func (r *specRun) plan(n int) stepPlan {
	switch {
	case r.policy != nil:
		k := r.policy.stepsFor(n)
		sh := Chain(k)
		if k == 0 {
			sh = Shape{KeepDraft: !r.skipZero}
		}
		return stepPlan{shape: sh, levels: r.chains[k], cold: r.cold[k], batch: n, skipZero: r.skipZero}
	case r.table != nil:
		k := r.table[min(n, len(r.table)-1)]
		return stepPlan{shape: Chain(k), levels: r.chains[k], batch: n}
	}
	return stepPlan{shape: r.static, levels: r.levels, batch: n}
}

// verified feeds a verify's accepted drafts per request to the adaptive policy; it returns
// the policy's log line ("" = none).
func (r *specRun) verified(p stepPlan, correct []int) string {
	if r.policy == nil {
		return ""
	}
	return r.policy.verified(p.batch, correct)
}

// graphs says whether a batch of n runs on captured CUDA graphs.
func (r *specRun) graphs(n int) bool { return n <= r.graphMax }

// levelsFor is the per-level acceptance stream r drafts with under p, and moves r's draft
// state on: a step 0 with skipZero leaves it stale; the first step above 0 after that
// accepts no draft (the stubbed draft state is zeros), the next Physics.ColdSteps draft cold.
func (p stepPlan) levelsFor(r *request, coldSteps int) []float64 {
	switch {
	case !p.skipZero:
		return p.levels
	case p.shape.Steps == 0:
		r.stale, r.cold = true, 0
		return p.levels
	case r.stale:
		r.stale, r.cold = false, coldSteps
		return nil
	case r.cold > 0:
		r.cold--
		return p.cold
	}
	return p.levels
}
