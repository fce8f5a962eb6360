// Package bench is a load generator for OpenAI-compatible inference servers
// and its statistics, with the definitions of sglang's bench_serving and vllm
// bench serve: N streaming requests at concurrency C with random prompts of
// fixed token length and ignore_eos; tokens counted from usage, never from
// chunks; acceptance of speculative decoding over the benchmark window.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
)

// Options of one benchmark run. Zero Concurrency means 1; zero Timeout means
// no per-request limit; nil HTTP means a client sized for Concurrency.
type Options struct {
	URL, Model string // URL of the server (scheme://host:port); Model "" = first of /v1/models
	Chat       bool   // /v1/chat/completions (text prompts) instead of /v1/completions

	Prompts, Concurrency, InputLen, OutputLen int

	Rate    float64       // requests/s, Poisson arrivals; 0 = all at once (bounded by Concurrency)
	Warmup  int           // warm-up requests, sent first and excluded from the result
	Timeout time.Duration // per request
	Seed    int64         // of the random prompts
	HTTP    *http.Client
	Dial    engine.DialFunc // opens the connections of the client Run builds when HTTP is nil; nil = direct TCP

	Acceptance    Acceptance // nil = no acceptance measure
	DraftsPerStep int        // k, for accept_rate = (accept_len-1)/k; 0 = as measured (vLLM)
	// RunningSteps, when set, says which speculative steps the engine runs
	// now (ok false: it does not say); Run samples it while the measured
	// requests run, into Result.EngineSteps.
	RunningSteps func(ctx context.Context) (steps int, ok bool)

	Settings Settings       // copied into Result.Settings
	Progress func(Progress) // about every 500ms and once at the end (Final), from one goroutine at a time
}

// Settings are what a benchmark ran under, as its result records them: the
// speculative settings (when known) and the load. Results are compared at
// equal loads only.
type Settings struct {
	Steps       int     `json:"steps,omitempty"`
	TopK        int     `json:"topk,omitempty"`
	DraftTokens int     `json:"draft_tokens,omitempty"`
	Prompts     int     `json:"prompts"`
	Concurrency int     `json:"concurrency"`
	InputLen    int     `json:"input_len"`
	OutputLen   int     `json:"output_len"`
	Rate        float64 `json:"rate,omitempty"` // requests/s; 0: all at once
	Chat        bool    `json:"chat,omitempty"` // through the chat completions API
}

// DraftsPerStep is k in accept_rate = (accept_len - 1) / k for an engine run
// with these speculative settings: the steps, or with a tree (topk > 1) the
// draft tokens verified per step less the root (SGLang's tree); vLLM
// proposes num_speculative_tokens per step: the steps.
func DraftsPerStep(vllm bool, steps, topk, draftTokens int) int {
	switch {
	case vllm:
		return steps
	case topk > 1 && draftTokens > 0:
		return draftTokens - 1
	}
	return steps
}

// ErrMostFailed: more than half the measured requests failed. Run returns it
// wrapped, with the Result.
var ErrMostFailed = errors.New("most requests failed")

func (o *Options) check() error {
	switch {
	case o.URL == "":
		return errors.New("benchmark: no server URL")
	case o.Prompts < 1:
		return fmt.Errorf("benchmark: prompts %d: want at least 1", o.Prompts)
	case o.Concurrency < 0:
		return fmt.Errorf("benchmark: concurrency %d: want at least 1", o.Concurrency)
	case o.InputLen < 1:
		return fmt.Errorf("benchmark: input length %d: want at least 1 token", o.InputLen)
	case o.OutputLen < 1:
		return fmt.Errorf("benchmark: output length %d: want at least 1 token", o.OutputLen)
	case o.Rate < 0 || o.Rate != o.Rate:
		return fmt.Errorf("benchmark: request rate %v: want 0 (all at once) or more", o.Rate)
	case o.Warmup < 0:
		return fmt.Errorf("benchmark: warm-up %d: want 0 or more", o.Warmup)
	case o.Timeout < 0:
		return fmt.Errorf("benchmark: timeout %s: want 0 (none) or more", o.Timeout)
	case o.DraftsPerStep < 0:
		return fmt.Errorf("benchmark: drafts per step %d: want 0 (unknown) or more", o.DraftsPerStep)
	}
	return nil
}

// NewHTTPClient is a client fit for conc concurrent streams: enough idle
// connections per host, no compression, no overall timeout (streams are
// bounded by their contexts), no redirect followed (engine.NewHTTPClient;
// Run sends every request through engine.Do, whatever client it is given).
func NewHTTPClient(conc int) *http.Client { return NewHTTPClientVia(conc, nil) }

// NewHTTPClientVia is NewHTTPClient with connections opened by dial (nil =
// direct TCP), e.g. through an SSH connection to the server's host.
func NewHTTPClientVia(conc int, dial engine.DialFunc) *http.Client {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		MaxIdleConns:        conc + 16,
		MaxIdleConnsPerHost: conc + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ReadBufferSize:      16 << 10,
		WriteBufferSize:     16 << 10,
	}
	return engine.NewHTTPClient(t)
}

// Run benchmarks o.URL: the model (from /v1/models unless given), the warm-up
// requests, then Acceptance.Begin, the measured requests, Acceptance.End. It
// returns a Result whenever requests were measured; the error then is nil,
// wraps ErrMostFailed when more than half failed, or wraps ctx.Err() when ctx
// ended (requests not sent are counted failed). Acceptance failures do not
// fail the run: they are listed in Result.Errors.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	base := engine.TrimBase(o.URL)
	hc := o.HTTP
	if hc == nil {
		hc = NewHTTPClientVia(o.Concurrency, o.Dial)
		defer hc.CloseIdleConnections()
	}
	model := o.Model
	if model == "" {
		ec := &engine.Client{BaseURL: base, HTTP: hc}
		ids, err := ec.Models(ctx)
		if err != nil {
			return nil, fmt.Errorf("benchmark %s: finding the model (none given): %w", base, err)
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("benchmark %s: no model given and /v1/models lists none", base)
		}
		model = ids[0]
	}
	c := &client{http: hc, model: model, chat: o.Chat, in: o.InputLen, out: o.OutputLen, seed: o.Seed, timeout: o.Timeout,
		url: base + "/v1/completions"}
	if o.Chat {
		c.url = base + "/v1/chat/completions"
	}
	res := &Result{Settings: o.Settings, Model: model, Concurrency: o.Concurrency, RequestRate: o.Rate,
		AcceptLen: Unknown(), AcceptRate: Unknown(), EngineAcceptRate: Unknown()}

	if o.Warmup > 0 {
		rows, _, _ := pool(ctx, c, o, o.Warmup, 0, true)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("benchmark %s: cancelled during warm-up: %w", base, ctx.Err())
		}
		for _, e := range errorCounts(rows) {
			res.Errors = append(res.Errors, "warm-up: "+e)
		}
	}
	if o.Acceptance != nil {
		if err := o.Acceptance.Begin(ctx); err != nil {
			res.Errors = append(res.Errors, "acceptance: "+err.Error())
			res.acceptUnknown(err)
			o.Acceptance = nil
		}
	}
	var stopSteps func() []StepsSeen
	if o.RunningSteps != nil {
		stopSteps = sampleSteps(ctx, o.RunningSteps)
	}
	rows, wall, sent := pool(ctx, c, o, o.Prompts, o.Warmup, false)
	if stopSteps != nil {
		res.EngineSteps = stopSteps()
	}
	res.compute(rows, wall)
	res.Requests = rows
	res.Errors = append(res.Errors, errorCounts(rows)...)
	switch {
	case o.Chat:
		res.PromptFormat = "chat"
	case c.textMode.Load():
		res.PromptFormat = "text"
		res.Errors = append(res.Errors, "the server refused token-id prompts (HTTP 400): sent text prompts of about the input length instead")
	default:
		res.PromptFormat = "token_ids"
	}
	if o.Acceptance != nil && ctx.Err() == nil {
		st, err := o.Acceptance.End(ctx)
		if err != nil {
			res.Errors = append(res.Errors, "acceptance: "+err.Error())
			res.acceptUnknown(err)
		} else {
			res.acceptMeasured(st, o.DraftsPerStep)
		}
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("benchmark %s cancelled after sending %d of %d requests: %w", base, sent, o.Prompts, err)
	}
	if res.RequestsFailed*2 > o.Prompts {
		return res, fmt.Errorf("benchmark %s: %w: %d of %d requests failed; %s", base, ErrMostFailed, res.RequestsFailed, o.Prompts, errorCounts(rows)[0])
	}
	return res, nil
}

// acceptMeasured records the acceptance st measured; k is the drafts per
// step the rate divides by (0: st.K, as the engine measured it; the rate is
// unknown when neither is known).
func (r *Result) acceptMeasured(st AcceptStats, k int) {
	r.AcceptLen, r.AcceptSource, r.LifetimeAcceptLen = round(st.AcceptLen), st.Source, round(st.Lifetime)
	if st.EngineRate > 0 {
		r.EngineAcceptRate = round(st.EngineRate)
	}
	r.AcceptOverWindow = st.Window
	drafts := float64(k)
	if drafts == 0 {
		drafts = st.K
	}
	if drafts > 0 {
		r.AcceptRate = round((r.AcceptLen - 1) / drafts) // from the rounded L: the two figures agree
		return
	}
	r.AcceptCause, r.AcceptUnknown = CauseDraftsUnknown, "drafts per step unknown"
	r.Errors = append(r.Errors, "accept_rate not computed: drafts per step unknown")
}

// acceptUnknown records why the acceptance measure gave nothing: err, the
// measure's error.
func (r *Result) acceptUnknown(err error) {
	r.AcceptCause, r.AcceptUnknown = CauseNotMeasured, "the engine gave no acceptance over the window"
	var short *ShortRunError
	if errors.As(err, &short) {
		r.AcceptCause, r.AcceptUnknown = CauseShortRun, short.Reason()
	}
}

// pool runs n requests (indices from first) on o.Concurrency workers, with
// Poisson arrivals when o.Rate > 0. It returns every row (unsent ones failed),
// the wall time from the first dispatch to the last completion, and how many
// were sent.
func pool(ctx context.Context, c *client, o Options, n, first int, warmup bool) ([]RequestRow, time.Duration, int) {
	rows := make([]RequestRow, n)
	conc := min(o.Concurrency, n)
	jobs := make(chan int, n)
	var done, ok, failed, toks atomic.Int64
	var sent atomic.Int64
	t0 := time.Now()
	go func() {
		defer close(jobs)
		rng := rand.New(rand.NewPCG(uint64(o.Seed), 1<<62))
		var timer *time.Timer
		for i := 0; i < n; i++ {
			if o.Rate > 0 && i > 0 {
				d := time.Duration(rng.ExpFloat64() / o.Rate * float64(time.Second))
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
			if ctx.Err() != nil {
				return
			}
			jobs <- i
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Go(func() {
			for i := range jobs {
				if ctx.Err() != nil {
					continue // left unsent
				}
				sent.Add(1)
				row := &rows[i]
				c.do(ctx, first+i, t0, row)
				row.Index, row.sent = i, true
				if row.OK {
					ok.Add(1)
					toks.Add(int64(row.OutputTokens))
				} else {
					failed.Add(1)
				}
				done.Add(1)
			}
		})
	}
	snap := func(final bool) Progress {
		return Progress{Warmup: warmup, Done: int(done.Load()), Total: n, OK: int(ok.Load()), Failed: int(failed.Load()),
			OutputTokens: int(toks.Load()), Elapsed: time.Since(t0), Final: final}
	}
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	if o.Progress != nil {
		pwg.Go(func() {
			tk := time.NewTicker(500 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					o.Progress(snap(false))
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	pwg.Wait()
	var last time.Time
	for i := range rows {
		if rows[i].end.After(last) {
			last = rows[i].end
		}
		if !rows[i].sent {
			rows[i] = RequestRow{Index: i, Error: "not sent: the benchmark was cancelled"}
			failed.Add(1)
			done.Add(1)
		}
	}
	if o.Progress != nil {
		o.Progress(snap(true))
	}
	wall := time.Duration(0)
	if !last.IsZero() {
		wall = last.Sub(t0)
	}
	return rows, wall, int(sent.Load())
}
