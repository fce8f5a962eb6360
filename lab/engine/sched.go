package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// request is one generation request. The scheduler owns generated/steps; the hand-off to the
// HTTP handler goes through mu (pending step sizes, finish) and the notify channel.
type request struct {
	id        string
	chat      bool
	model     string
	prompt    int
	maxTokens int
	eosAt     int // stop after this many tokens (0 = ignore_eos)
	created   int64
	draws     rng   // EOS draw, output words' seed, id
	accept    draws // acceptance (scheduler)
	text      rng   // output words (handler)

	generated int // scheduler only
	steps     int // verify steps that gave it tokens (scheduler only)
	// stale and cold are its draft state (scheduler only): stale after a step 0 that skipped
	// the draft extend; cold, the verify steps left before its drafts are accepted as usual.
	stale bool
	cold  int

	received, admitted, first, last time.Time // truth: admitted under Engine.mu, first/last by the scheduler

	mu       sync.Mutex
	pending  []int // tokens of each verify step not yet written
	finished bool
	finish   string        // "length" or "stop"
	notify   chan struct{} // cap 1
	aborted  atomic.Bool
}

func (r *request) limit() int {
	if r.eosAt > 0 && r.eosAt < r.maxTokens {
		return r.eosAt
	}
	return r.maxTokens
}

// deliver hands one verify step's tokens (n may be 0 for a request that ends without any).
func (r *request) deliver(n int, finished bool, reason string) {
	r.mu.Lock()
	if n > 0 {
		r.pending = append(r.pending, n)
	}
	if finished {
		r.finished, r.finish = true, reason
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// take returns the pending steps (into buf) and whether the request has finished.
func (r *request) take(buf []int) ([]int, bool, string) {
	r.mu.Lock()
	buf = append(buf[:0], r.pending...)
	r.pending = r.pending[:0]
	fin, reason := r.finished, r.finish
	r.mu.Unlock()
	return buf, fin, reason
}

// maxLag is how late the scheduler may wake and still catch up: a GPU's iterations do not
// slow down when the host's CPU is busy, so iterations a late wake-up (a loaded machine, a
// coarse timer) delayed run back to back until the engine is on time again, and its
// throughput stays the physics'. Beyond maxLag (a stopped process, a suspended machine) the
// lost time is lost, as it would be.
const maxLag = 2 * time.Second

// loop is the scheduler: one goroutine running batched iterations. A prefill iteration admits
// waiting requests (up to MaxRunningRequests running, ChunkedPrefillSize prompt tokens per
// batch); a decode iteration is one verify step that advances every running stream.
func (e *Engine) loop() {
	defer close(e.loopDone)
	var running []*request
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var next time.Time
	defer func() { e.endAll(running) }()
	for {
		e.mu.Lock()
		admitted, newTok := e.admit(len(running))
		queued := len(e.waiting)
		e.mu.Unlock()
		if len(running) == 0 && len(admitted) == 0 {
			e.flushStats(0, queued, true)
			select {
			case <-e.wake:
				next = time.Time{}
				continue
			case <-e.done:
				return
			}
		}
		var dt time.Duration
		var plan stepPlan
		if len(admitted) > 0 {
			dt = e.phys.T0 + time.Duration(newTok)*e.phys.PrefillTok
		} else {
			plan = e.spec.plan(len(running))
			dt = e.phys.StepTime(plan.shape, len(running))
		}
		now := time.Now()
		if next.IsZero() || now.Sub(next) > maxLag {
			next = now // idle, or too far behind to catch up with a short burst
		}
		next = next.Add(dt)
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-e.done:
				timer.Stop()
				running = append(running, admitted...)
				return
			}
		} else {
			select {
			case <-e.done:
				running = append(running, admitted...)
				return
			default:
			}
		}
		if len(admitted) > 0 {
			running = append(running, admitted...)
			e.logPrefill(len(admitted), newTok, len(running)-len(admitted), queued)
			continue
		}
		var lines []string
		running, queued, lines = e.step(running, plan)
		for _, l := range lines {
			e.emit(l)
		}
		e.flushStats(len(running), queued, false)
	}
}

// admit moves waiting requests into the batch (mu held); aborted ones are dropped.
func (e *Engine) admit(nRunning int) ([]*request, int) {
	var out []*request
	tokens := 0
	i := 0
	for ; i < len(e.waiting); i++ {
		r := e.waiting[i]
		if r.aborted.Load() {
			e.st.truth.Aborted++
			continue
		}
		if nRunning+len(out) >= e.s.MaxRunningRequests ||
			(len(out) > 0 && tokens+r.prompt > e.s.ChunkedPrefillSize) {
			break
		}
		out = append(out, r)
		r.admitted = time.Now()
		tokens += r.prompt
		e.st.truth.PromptTokens += int64(r.prompt)
		e.st.addPrompt(r.prompt)
	}
	n := copy(e.waiting, e.waiting[i:])
	clear(e.waiting[n:])
	e.waiting = e.waiting[:n]
	e.st.active = nRunning + len(out)
	return out, tokens
}

// step runs one verify step of plan over running and returns the streams still running, the
// requests queued, and the log lines it writes: SGLang's adaptive runtime-state switch when
// this batch runs other steps than the last, its decode log line when this decode iteration
// closes a log window, the adaptive controller's line when it moved the steps. Counters, the
// log window and the cumulative acceptance are updated
// together under Engine.mu, before the tokens are handed over, so a client that sees its
// request end also sees it in Truth, and a flush of the cache never splits an iteration.
func (e *Engine) step(running []*request, plan stepPlan) ([]*request, int, []string) {
	var s stepStats
	s.acceptedPos = e.st.scratch(len(plan.levels))
	correct := e.correct[:0]
	out := e.outs[:0]
	now := time.Now()
	inUse := 0
	for _, r := range running {
		if r.aborted.Load() {
			s.aborted++
			continue
		}
		drawn := r.accept.emitted(plan.levelsFor(r, e.phys.ColdSteps), r.generated)
		correct = append(correct, drawn-1)
		n := min(drawn, r.limit()-r.generated)
		r.generated += n
		r.steps++
		if n > 0 {
			if r.first.IsZero() {
				r.first = now
			}
			r.last = now
		}
		s.streams++
		s.tokens += n
		for p := 0; p < n-1; p++ {
			s.acceptedPos[p]++
		}
		o := outcome{r: r, n: n}
		if r.generated >= r.limit() {
			o.fin, o.reason = true, "length"
			if r.generated < r.maxTokens {
				o.reason = "stop"
			}
			s.finished++
		} else {
			inUse += r.prompt + r.generated
		}
		out = append(out, o)
	}
	e.correct = correct
	adapt := e.spec.verified(plan, correct)
	e.mu.Lock()
	var lines []string
	if e.spec.policy != nil && plan.shape.Steps != e.curSteps {
		// EAGLEWorkerV2.apply_runtime_state, when activate_step_by_batch switched states.
		lines = append(lines, fmt.Sprintf("%s Switch adaptive runtime state: steps %d -> %d, draft_tokens %d -> %d",
			rankStamp(now), e.curSteps, plan.shape.Steps, e.curSteps+1, plan.shape.Steps+1))
		e.curSteps = plan.shape.Steps
	}
	e.st.addStep(s, plan.shape.Drafts())
	for _, o := range out {
		if o.fin {
			e.st.record(o.r)
		}
	}
	e.st.active = s.streams - s.finished
	queued := len(e.waiting)
	e.st.decodeIters++
	if e.s.Flavor == "sglang" && e.st.decodeIters%e.s.DecodeLogInterval == 0 {
		lines = append(lines, e.logDecode(now, s.streams-s.finished, queued, inUse))
	}
	if adapt != "" {
		lines = append(lines, rankStamp(now)+" "+adapt)
	}
	e.mu.Unlock()
	kept := running[:0]
	for _, o := range out {
		o.r.deliver(o.n, o.fin, o.reason)
		if !o.fin {
			kept = append(kept, o.r)
		}
	}
	clear(running[len(kept):])
	clear(out)
	e.outs = out[:0]
	return kept, queued, lines
}

// outcome is one stream's share of a verify step.
type outcome struct {
	r      *request
	n      int
	fin    bool
	reason string
}

// endAll ends every open request at Close.
func (e *Engine) endAll(running []*request) {
	e.mu.Lock()
	waiting := e.waiting
	e.waiting = nil
	e.mu.Unlock()
	for _, r := range append(running, waiting...) {
		r.deliver(0, false, "")
	}
}
