package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
)

// vllmServer serves /metrics whose counters advance by the given deltas on
// every scrape after the first.
func vllmServer(t *testing.T, drafts, draftTokens, accepted float64) *httptest.Server {
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		n := float64(scrapes.Add(1) - 1)
		// two engines (label sets): the counters are summed.
		for _, eng := range []string{"0", "1"} {
			fmt.Fprintf(w, "# TYPE vllm:spec_decode_num_drafts_total counter\n")
			fmt.Fprintf(w, "vllm:spec_decode_num_drafts_total{engine=%q,model_name=\"m\"} %g\n", eng, 1000+n*drafts/2)
			fmt.Fprintf(w, "vllm:spec_decode_num_draft_tokens_total{engine=%q,model_name=\"m\"} %g\n", eng, 3000+n*draftTokens/2)
			fmt.Fprintf(w, "vllm:spec_decode_num_accepted_tokens_total{engine=%q,model_name=\"m\"} %g\n", eng, 2000+n*accepted/2)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestVLLMAcceptance(t *testing.T) {
	t.Parallel()
	// 400 drafts of 3 tokens, 700 accepted: L = 1 + 700/400 = 2.75, rate 700/1200.
	srv := vllmServer(t, 400, 1200, 700)
	a := VLLMAcceptance(engine.New(srv.URL))
	ctx := context.Background()
	if err := a.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := a.End(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(st.AcceptLen-2.75) > 1e-9 || math.Abs(st.EngineRate-700.0/1200) > 1e-9 || st.K != 3 {
		t.Fatalf("got %+v", st)
	}
}

func TestVLLMAcceptanceNoDrafts(t *testing.T) {
	t.Parallel()
	srv := vllmServer(t, 0, 0, 0)
	a := VLLMAcceptance(engine.New(srv.URL))
	if err := a.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.End(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing to measure") {
		t.Fatalf("err %v", err)
	}
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "up 1") }))
	defer srv2.Close()
	if err := VLLMAcceptance(engine.New(srv2.URL)).Begin(context.Background()); err == nil || !strings.Contains(err.Error(), "speculative decoding") {
		t.Fatalf("no counters: err %v", err)
	}
}

// sglangServer serves /server_info and, when gauge > 0, /metrics.
func sglangServer(t *testing.T, gauge, lifetime float64) *httptest.Server {
	srv, _ := sglangServerGauge(t, gauge, lifetime)
	return srv
}

// sglangServerGauge is sglangServer with a setter for the gauge: an engine
// that logs a decode line updates it.
func sglangServerGauge(t *testing.T, gauge, lifetime float64) (*httptest.Server, func(float64)) {
	var mu sync.Mutex
	set := func(g float64) { mu.Lock(); gauge = g; mu.Unlock() }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gauge := gauge
		mu.Unlock()
		switch r.URL.Path {
		case "/server_info":
			fmt.Fprintf(w, `{"speculative_num_steps":3,"internal_states":[{"avg_spec_accept_length":%g}]}`, lifetime)
		case "/flush_cache": // answers 200 and restarts nothing, like early SGLang
			io.WriteString(w, "Cache flushed.\n")
		case "/metrics":
			if gauge == 0 {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, "sglang:spec_accept_length{model_name=\"m\"} %g\nsglang:spec_accept_rate{model_name=\"m\"} 0.5\n", gauge)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, set
}

func stamp(t time.Time) string { return t.Format("[2006-01-02 15:04:05 TP0]") }

func TestSGLangAcceptanceFromLines(t *testing.T) {
	t.Parallel()
	srv := sglangServer(t, 2.0, 1.9)
	var lines []string
	var since time.Time
	a := SGLangAcceptance(engine.New(srv.URL), func(ctx context.Context, s time.Time) ([]string, error) {
		since = s
		return lines, nil
	})
	ctx := context.Background()
	if err := a.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lines = []string{
		stamp(now.Add(-time.Hour)) + " Decode batch, #running-req: 50, accept len: 1.10, accept rate: 0.03, gen throughput (token/s): 10, #queue-req: 0", // before the window
		stamp(now) + " Prefill batch, #new-seq: 1, #new-token: 32",
		stamp(now) + " Decode batch, #running-req: 1, #token: 10, accept len: 3.00, accept rate: 0.66, gen throughput (token/s): 200.00, #queue-req: 0",
		"Decode batch. #running-req: 3, #token: 10, accept len: 2.00, gen throughput (token/s): 150.00, #queue-req: 0,",              // no stamp: trusted
		stamp(now.Add(time.Hour)) + " Decode batch, #running-req: 50, accept len: 1.10, gen throughput (token/s): 10, #queue-req: 0", // after
	}
	st, err := a.End(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// weighted by running: (1*3 + 3*2) / 4 = 2.25; rate only from the line that has it.
	if math.Abs(st.AcceptLen-2.25) > 1e-9 || math.Abs(st.EngineRate-0.66) > 1e-9 || st.Lifetime != 1.9 {
		t.Fatalf("got %+v", st)
	}
	if !strings.Contains(st.Source, "decode log lines of the window (2,") || !st.Window {
		t.Fatalf("source %q", st.Source)
	}
	if since.IsZero() || time.Since(since) > time.Minute {
		t.Fatalf("logs asked since %v", since)
	}
}

// After a flush, the decode log counts from the engine's flush line on: a
// line of the run before, stamped in the same second as the window's start,
// is not the window's. With no line after the flush (a run shorter than one
// decode-log window) acceptance is unknown, not the run before's.
func TestSGLangAcceptanceLinesAfterTheFlush(t *testing.T) {
	t.Parallel()
	var flushed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/server_info": // the cumulative figure restarts at a flush (absent until a window closes)
			avg := "1.92"
			if flushed.Load() {
				avg = "null"
			}
			fmt.Fprintf(w, `{"decode_log_interval":40,"internal_states":[{"avg_spec_accept_length":%s}]}`, avg)
		case "/flush_cache":
			flushed.Store(true)
			io.WriteString(w, "Cache flushed.\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	now := time.Now()
	before := stamp(now) + " Decode batch, #running-req: 32, #token: 10, accept len: 1.92, accept rate: 0.92, gen throughput (token/s): 2900.00, #queue-req: 0"
	flush := stamp(now) + " Cache flushed successfully!"
	after := stamp(now) + " Decode batch, #running-req: 1, #token: 10, accept len: 6.40, accept rate: 0.67, gen throughput (token/s): 250.00, #queue-req: 0"
	for _, tc := range []struct {
		name  string
		lines []string
		want  float64 // 0: unknown
	}{
		{"a short run", []string{before, flush}, 0},
		{"a window closed", []string{before, flush, after}, 6.40},
	} {
		flushed.Store(false)
		var since time.Time
		a := SGLangAcceptance(engine.New(srv.URL), func(ctx context.Context, s time.Time) ([]string, error) {
			since = s
			return tc.lines, nil
		})
		ctx := context.Background()
		t0 := time.Now()
		if err := a.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		begun := time.Now()
		st, err := a.End(ctx)
		if since.Before(t0) || !since.Before(begun) {
			t.Fatalf("%s: log read since %v, want the flush's request (between %v and %v)", tc.name, since, t0, begun)
		}
		if tc.want == 0 {
			var short *ShortRunError
			if !errors.As(err, &short) || st.AcceptLen != 0 {
				t.Fatalf("%s: got %+v, %v; want a short run, acceptance unknown", tc.name, st, err)
			}
			continue
		}
		if err != nil || st.AcceptLen != tc.want || !st.Window {
			t.Fatalf("%s: got %+v, %v; want %v over the window", tc.name, st, err, tc.want)
		}
	}
}

func TestSGLangAcceptanceFallbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noLines := func(context.Context, time.Time) ([]string, error) { return nil, nil }
	// gauge, updated during the run
	srv, set := sglangServerGauge(t, 2.1, 1.9)
	a := SGLangAcceptance(engine.New(srv.URL), noLines)
	a.Begin(ctx)
	set(2.4)
	st, err := a.End(ctx)
	if err != nil || st.AcceptLen != 2.4 || st.EngineRate != 0.5 || !strings.Contains(st.Source, "gauge") {
		t.Fatalf("gauge: %+v %v", st, err)
	}
	// a gauge that did not move describes an earlier window: lifetime instead
	a = SGLangAcceptance(engine.New(sglangServer(t, 2.4, 1.9).URL), noLines)
	a.Begin(ctx)
	st, err = a.End(ctx)
	if err != nil || st.AcceptLen != 1.9 || !strings.Contains(st.Source, "lifetime") {
		t.Fatalf("stale gauge: %+v %v", st, err)
	}
	// server_info lifetime
	a = SGLangAcceptance(engine.New(sglangServer(t, 0, 1.9).URL), nil)
	a.Begin(ctx)
	st, err = a.End(ctx)
	if err != nil || st.AcceptLen != 1.9 || !strings.Contains(st.Source, "lifetime") {
		t.Fatalf("lifetime: %+v %v", st, err)
	}
	// nothing at all
	a = SGLangAcceptance(engine.New(sglangServer(t, 0, 0).URL), noLines)
	a.Begin(ctx)
	if _, err = a.End(ctx); err == nil || !strings.Contains(err.Error(), "no decode line") || !strings.Contains(err.Error(), "no avg_spec_accept_length") {
		t.Fatalf("nothing: %v", err)
	}
	// a flush answered 200 that left the lifetime average in place is not trusted
	a = SGLangAcceptance(engine.New(sglangServer(t, 0, 1.9).URL), noLines)
	a.Begin(ctx)
	st, err = a.End(ctx)
	if err != nil || st.Window || st.Source != SourceSGLangLifetime {
		t.Fatalf("flush that restarted nothing: %+v %v", st, err)
	}
}

// TestRunAcceptance: Run folds acceptance in: accept_rate = (L-1)/k with the
// given k, or vLLM's measured k.
func TestRunAcceptance(t *testing.T) {
	t.Parallel()
	f := fake{}
	srv := f.start(t)
	m := vllmServer(t, 400, 1200, 700)
	o := opts(srv.URL)
	o.Acceptance = VLLMAcceptance(engine.New(m.URL))
	res, err := run(t, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.AcceptLen != 2.75 || math.Abs(res.AcceptRate-1.75/3) > 1e-6 || res.AcceptSource == "" {
		t.Fatalf("measured k: %+v", res)
	}
	o.Acceptance = VLLMAcceptance(engine.New(m.URL))
	o.DraftsPerStep = 5
	res, err = run(t, o)
	if err != nil || math.Abs(res.AcceptRate-1.75/5) > 1e-6 {
		t.Fatalf("given k: %v %+v", err, res)
	}
	// a failing acceptance is reported, not fatal
	bad := httptest.NewServer(http.NotFoundHandler())
	defer bad.Close()
	o.Acceptance = VLLMAcceptance(engine.New(bad.URL))
	res, err = run(t, o)
	if err != nil || Known(res.AcceptLen) || res.AcceptCause != CauseNotMeasured || !strings.HasPrefix(res.Errors[0], "acceptance: ") {
		t.Fatalf("bad acceptance: %v %+v", err, res.Errors)
	}
}
