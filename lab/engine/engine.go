package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure an Engine.
type Options struct {
	// Physics is the speed model; the zero value means DefaultPhysics().
	Physics Physics
	// Log receives each log line the engine writes (SGLang decode/prefill lines and cache
	// flushes, vLLM stats lines). It is called from the scheduler goroutine, and from the
	// /flush_cache handler, without engine locks held: it must be safe for concurrent use;
	// nil = none.
	Log func(line string)
	// StatsInterval is vLLM's stats log interval (0 = 10s). SGLang logs every
	// Settings.DecodeLogInterval decode iterations instead.
	StatsInterval time.Duration
}

// Engine is a running simulated inference server. Its HTTP handler and methods are safe for
// concurrent use. Token speed is real time: a verify step of StepTime lasts that long.
type Engine struct {
	s       Settings
	phys    Physics
	log     func(string)
	spec    specRun
	statsIv time.Duration
	start   time.Time

	ready atomic.Bool
	seq   atomic.Uint64

	mu       sync.Mutex // guards waiting, st and curSteps
	waiting  []*request
	st       stats
	curSteps int // steps of the active speculative state (SGLang adaptive: the last batch's)

	outs    []outcome // scheduler scratch
	correct []int     // scheduler scratch: drafts accepted per stream in one step

	wake      chan struct{} // cap 1: a request arrived
	done      chan struct{} // closed by Close
	loopDone  chan struct{}
	closeOnce sync.Once
}

// New starts an engine with settings s (normally the result of Check; unset values get
// Check's defaults) and its scheduler goroutine. Close stops it.
func New(s Settings, o Options) *Engine {
	if c, _, err := Check(s); err == nil {
		s = c
	}
	if s.MaxRunningRequests <= 0 {
		s.MaxRunningRequests = sglangDefaultMaxRunning
	}
	p := o.Physics
	if p == (Physics{}) {
		p = DefaultPhysics()
	}
	e := &Engine{s: s, phys: p, log: o.Log, statsIv: o.StatsInterval, start: time.Now(),
		wake: make(chan struct{}, 1), done: make(chan struct{}), loopDone: make(chan struct{})}
	if e.statsIv <= 0 {
		e.statsIv = 10 * time.Second
	}
	e.spec = newSpecRun(s, p)
	e.curSteps = s.Steps
	e.st.init(e.spec.maxLevels, e.start)
	go e.loop()
	return e
}

// Settings returns the settings the engine runs with.
func (e *Engine) Settings() Settings { return e.s }

// SetReady switches /health (and /health_generate) between 503 and 200.
func (e *Engine) SetReady(ready bool) { e.ready.Store(ready) }

// Close stops the scheduler and ends open streams (they end without [DONE]); waiting
// non-stream requests get 503. It returns once the scheduler has stopped; safe to call twice.
func (e *Engine) Close() {
	e.closeOnce.Do(func() { close(e.done) })
	<-e.loopDone
}

// Truth is the engine's ground truth since start, for checking a benchmark.
type Truth struct {
	OutputTokens   int64   `json:"output_tokens"`   // tokens emitted, all requests
	VerifySteps    int64   `json:"verify_steps"`    // per-stream verify steps (a batch step of n streams counts n)
	BatchSteps     int64   `json:"batch_steps"`     // decode iterations of the scheduler
	Requests       int64   `json:"requests"`        // requests that finished generating
	Aborted        int64   `json:"aborted"`         // requests dropped by their client
	PromptTokens   int64   `json:"prompt_tokens"`   // of admitted requests
	AcceptLen      float64 `json:"accept_len"`      // OutputTokens / VerifySteps (0 before the first step)
	DraftSteps     int64   `json:"draft_steps"`     // per-stream verify steps that drafted (vLLM's num_drafts)
	DraftsProposed int64   `json:"drafts_proposed"` // draft tokens verified: DraftTokens-1 per drafting step
	DraftsAccepted int64   `json:"drafts_accepted"` // OutputTokens - VerifySteps
}

// Truth returns the cumulative ground truth.
func (e *Engine) Truth() Truth {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.st.truth
	if t.VerifySteps > 0 {
		t.AcceptLen = float64(t.OutputTokens) / float64(t.VerifySteps)
	}
	return t
}

// submit queues r for the scheduler.
func (e *Engine) submit(r *request) {
	e.mu.Lock()
	e.waiting = append(e.waiting, r)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// RequestTruth is one finished request as the engine saw it: when it arrived, when the
// scheduler admitted it, when it emitted its first and its last token (at the end of
// those verify steps), its tokens and the verify steps it took part in.
type RequestTruth struct {
	ID           string    `json:"id"`
	Received     time.Time `json:"received"`
	Admitted     time.Time `json:"admitted"`
	FirstToken   time.Time `json:"first_token"`
	LastToken    time.Time `json:"last_token"`
	PromptTokens int       `json:"prompt_tokens"`
	OutputTokens int       `json:"output_tokens"`
	VerifySteps  int       `json:"verify_steps"`
}

// Requests returns the truth of the finished requests, oldest first (the most recent
// 50,000 to 100,000 are kept). Aborted requests are not in it.
func (e *Engine) Requests() []RequestTruth {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]RequestTruth(nil), e.st.done...)
}

// FlushCache is SGLang's flush_cache: when no request is running or waiting it restarts
// the cumulative acceptance (/server_info's avg_spec_accept_length is then absent until
// the next decode log line), the open decode-log window and the count of decode
// iterations, logs "Cache flushed successfully!" and returns true; otherwise it logs why
// not, changes nothing and returns false. Truth is never reset.
func (e *Engine) FlushCache() bool {
	now := time.Now()
	e.mu.Lock()
	queued, active := len(e.waiting), e.st.active
	ok := queued == 0 && active == 0
	if ok {
		e.st.cumTokens, e.st.cumSteps, e.st.decodeIters = 0, 0, 0
		e.st.sgl.reset(now)
	}
	e.mu.Unlock()
	if ok {
		e.emit(rankStamp(now) + " Cache flushed successfully!")
	} else {
		e.emit(fmt.Sprintf("%s Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d", rankStamp(now), queued, active))
	}
	return ok
}
