// Package loadgen runs requests continuously against an engine or a router
// and counts what succeeded and what failed: the traffic a replicated
// service keeps serving while opsbot drains, changes and rolls it out, for
// tests and for `opsbot` benchmarks. It speaks the OpenAI-compatible
// completions API every engine opsbot runs serves (SGLang, vLLM, the lab's),
// follows no redirect (engine.Do) and quotes what a failure said
// (engine.Excerpt).
package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
)

// Options configure a Gen.
type Options struct {
	URL         string        // the base URL requests go to (a router's or an engine's)
	Concurrency int           // requests in flight at once, each sent right after the last (0 = 2)
	MaxTokens   int           // tokens asked of each request (0 = 16)
	Stream      bool          // stream the answer (SSE): a success then needs its "data: [DONE]"
	Timeout     time.Duration // per request (0 = 60s): one slower fails
	HTTP        *http.Client  // nil: a plain client
}

// Stats are a Gen's counts so far.
type Stats struct {
	Sent    int64    // requests finished, whatever their outcome
	OK      int64    // HTTP 200 and a whole answer
	Failed  int64    // anything else (a connection error, a status, a broken stream, a timeout)
	Errors  []string // the first distinct failures, quoted (at most MaxErrors)
	Elapsed time.Duration
}

// MaxErrors is how many distinct failures Stats keeps.
const MaxErrors = 8

// Gen is a running load generator.
type Gen struct {
	o       Options
	body    []byte
	start   time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ok      atomic.Int64
	failed  atomic.Int64
	mu      sync.Mutex
	errs    []string
	stopped time.Duration
}

// Start starts sending requests to opts.URL until Stop or ctx's end.
func Start(ctx context.Context, opts Options) (*Gen, error) {
	if !strings.HasPrefix(opts.URL, "http://") && !strings.HasPrefix(opts.URL, "https://") {
		return nil, fmt.Errorf("load generator: url %q: want http://HOST:PORT", engine.Excerpt(opts.URL))
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 2
	}
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = 16
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	opts.URL = strings.TrimRight(opts.URL, "/")
	g := &Gen{o: opts, start: time.Now(),
		body: fmt.Appendf(nil, `{"prompt": "Say something about load balancers.", "max_tokens": %d, "stream": %t}`, opts.MaxTokens, opts.Stream)}
	ctx, g.cancel = context.WithCancel(ctx)
	for range opts.Concurrency {
		g.wg.Add(1)
		go g.run(ctx)
	}
	return g, nil
}

func (g *Gen) run(ctx context.Context) {
	defer g.wg.Done()
	for ctx.Err() == nil {
		err := g.one(ctx)
		if ctx.Err() != nil && err != nil {
			return // stopped mid-request: neither a success nor the service's failure
		}
		if err == nil {
			g.ok.Add(1)
			continue
		}
		g.failed.Add(1)
		g.note(err.Error())
	}
}

// one sends one request and reads its whole answer.
func (g *Gen) one(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.o.URL+"/v1/completions", bytes.NewReader(g.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := engine.Do(g.o.HTTP, req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			return fmt.Errorf("%s", engine.Excerpt(ue.Unwrap().Error()))
		}
		return fmt.Errorf("%s", engine.Excerpt(err.Error()))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, engine.Excerpt(string(b)))
	}
	if err != nil {
		return fmt.Errorf("the answer broke off: %s", engine.Excerpt(err.Error()))
	}
	if g.o.Stream && !bytes.Contains(b, []byte("data: [DONE]")) {
		return fmt.Errorf("the stream ended without [DONE]: %s", engine.Excerpt(tail(string(b))))
	}
	if !g.o.Stream && !bytes.Contains(b, []byte(`"choices"`)) {
		return fmt.Errorf("not a completion: %s", engine.Excerpt(string(b)))
	}
	return nil
}

func (g *Gen) note(e string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.errs) >= MaxErrors {
		return
	}
	for _, x := range g.errs {
		if x == e {
			return
		}
	}
	g.errs = append(g.errs, e)
}

// Stats returns the counts so far.
func (g *Gen) Stats() Stats {
	g.mu.Lock()
	errs := append([]string(nil), g.errs...)
	el := g.stopped
	g.mu.Unlock()
	if el == 0 {
		el = time.Since(g.start)
	}
	// Failed and OK first: Sent is counted after them, so OK+Failed >= Sent never overstates.
	s := Stats{Failed: g.failed.Load(), OK: g.ok.Load(), Errors: errs, Elapsed: el}
	s.Sent = s.OK + s.Failed
	return s
}

// Stop stops sending, abandons the requests in flight (they count neither
// way) and returns the final counts.
func (g *Gen) Stop() Stats {
	g.cancel()
	g.wg.Wait()
	g.mu.Lock()
	if g.stopped == 0 {
		g.stopped = time.Since(g.start)
	}
	g.mu.Unlock()
	return g.Stats()
}

// String is the counts for a person: "412 requests, 0 failed in 8.1s".
func (s Stats) String() string {
	out := fmt.Sprintf("%d requests, %d failed in %s", s.Sent, s.Failed, s.Elapsed.Round(100*time.Millisecond))
	if len(s.Errors) > 0 {
		out += " (" + strings.Join(s.Errors, "; ") + ")"
	}
	return out
}

func tail(s string) string {
	if len(s) > 200 {
		return s[len(s)-200:]
	}
	return s
}
