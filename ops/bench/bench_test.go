package bench

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func opts(url string) Options {
	return Options{URL: url, Prompts: 12, Concurrency: 4, InputLen: 32, OutputLen: 20, Timeout: 30 * time.Second}
}

func run(t *testing.T, o Options) (*Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return Run(ctx, o)
}

func TestStreamingVariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    *fake
		chat bool
	}{
		{"one token per chunk", &fake{}, false},
		{"several tokens per chunk", &fake{TokensPerChunk: 4}, false},
		{"comments and sse fields", &fake{Comments: true, TokensPerChunk: 3}, false},
		{"usage null on chunks", &fake{UsageNull: true, TokensPerChunk: 2}, false},
		{"no done", &fake{NoDone: true}, false},
		{"chat", &fake{TokensPerChunk: 2, UsageNull: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			srv := f.start(t)
			o := opts(srv.URL + "/v1")
			o.Chat = tc.chat
			res, err := run(t, o)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequestsOK != 12 || res.RequestsFailed != 0 || len(res.Errors) != 0 {
				t.Fatalf("ok %d failed %d errors %v", res.RequestsOK, res.RequestsFailed, res.Errors)
			}
			if res.OutputTokens != 12*20 || int64(res.OutputTokens) != f.tokens.Load() {
				t.Fatalf("output tokens %d, server sent %d, want %d", res.OutputTokens, f.tokens.Load(), 12*20)
			}
			per := max(f.TokensPerChunk, 1)
			wantChunks := (20 + per - 1) / per
			for _, row := range res.Requests {
				if row.Chunks != wantChunks || row.OutputTokens != 20 || !row.OK {
					t.Fatalf("row %+v: want %d chunks, 20 tokens", row, wantChunks)
				}
			}
			if res.Model != "test-model" {
				t.Fatalf("model %q, want the one of /v1/models", res.Model)
			}
			if !tc.chat && (res.PromptFormat != "token_ids" || res.InputTokens != 12*32) {
				t.Fatalf("prompt format %s, input tokens %d; want token_ids, %d", res.PromptFormat, res.InputTokens, 12*32)
			}
			if res.OutputTokS <= 0 || res.TPOT.Mean <= 0 || res.PerStreamTokS <= 0 {
				t.Fatalf("figures missing: %+v", res)
			}
		})
	}
}

func TestErrorMidStream(t *testing.T) {
	t.Parallel()
	f := fake{ErrorAfter: 3}
	srv := f.start(t)
	res, err := run(t, opts(srv.URL))
	if !errors.Is(err, ErrMostFailed) {
		t.Fatalf("err %v, want ErrMostFailed", err)
	}
	if res == nil || res.RequestsFailed != 12 || res.RequestsOK != 0 || res.OutputTokens != 0 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(strings.Join(res.Errors, "\n"), "12 requests: error in stream: CUDA out of memory") {
		t.Fatalf("errors %q do not carry the server's message", res.Errors)
	}
}

func TestNoUsageIsFailure(t *testing.T) {
	t.Parallel()
	f := fake{NoUsage: true}
	srv := f.start(t)
	res, err := run(t, opts(srv.URL))
	if !errors.Is(err, ErrMostFailed) || res.OutputTokens != 0 || res.RequestsFailed != 12 {
		t.Fatalf("err %v, result %+v", err, res)
	}
	if !strings.Contains(res.Errors[0], "include_usage") || !strings.Contains(err.Error(), "no usage") {
		t.Fatalf("errors %q / %v do not say usage is missing", res.Errors, err)
	}
}

func TestSomeServerErrorsCounted(t *testing.T) {
	t.Parallel()
	f := fake{Status: 500, StatusEvery: 3}
	srv := f.start(t)
	res, err := run(t, opts(srv.URL))
	if err != nil {
		t.Fatalf("4 of 12 failed should not fail the run: %v", err)
	}
	if res.RequestsFailed != 4 || res.RequestsOK != 8 || res.OutputTokens != 8*20 {
		t.Fatalf("ok %d failed %d tokens %d", res.RequestsOK, res.RequestsFailed, res.OutputTokens)
	}
	if len(res.Errors) != 1 || !strings.HasPrefix(res.Errors[0], "4 requests: HTTP 500") {
		t.Fatalf("errors %q", res.Errors)
	}
	n := 0
	for _, r := range res.Requests {
		if !r.OK {
			n++
		}
	}
	if n != 4 || len(res.Requests) != 12 {
		t.Fatalf("%d rows, %d failed rows", len(res.Requests), n)
	}
}

func TestMostFailed500(t *testing.T) {
	t.Parallel()
	f := fake{Status: 500}
	srv := f.start(t)
	res, err := run(t, opts(srv.URL))
	if !errors.Is(err, ErrMostFailed) || res == nil || res.RequestsFailed != 12 {
		t.Fatalf("err %v res %+v", err, res)
	}
	if !strings.Contains(err.Error(), "12 of 12 requests failed") || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("error %q", err)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	f := fake{Hang: true}
	srv := f.start(t)
	o := opts(srv.URL)
	o.Timeout = 100 * time.Millisecond
	o.Prompts = 4
	t0 := time.Now()
	res, err := run(t, o)
	if !errors.Is(err, ErrMostFailed) || res.RequestsFailed != 4 {
		t.Fatalf("err %v res %+v", err, res)
	}
	if !strings.Contains(res.Errors[0], "timed out after 100ms (1 content chunks received)") {
		t.Fatalf("errors %q", res.Errors)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("took %s with a 100ms timeout", d)
	}
}

func TestTextFallback(t *testing.T) {
	t.Parallel()
	f := fake{RefuseIDs: true}
	srv := f.start(t)
	o := opts(srv.URL)
	o.Concurrency = 1
	res, err := run(t, o)
	if err != nil || res.RequestsOK != 12 {
		t.Fatalf("err %v res %+v", err, res)
	}
	if f.idPrompts.Load() != 1 || res.PromptFormat != "text" {
		t.Fatalf("%d token-id attempts (want 1, then text), format %s", f.idPrompts.Load(), res.PromptFormat)
	}
	if res.InputTokens != 12*32 {
		t.Fatalf("text prompts of %d words in all, want %d", res.InputTokens, 12*32)
	}
}

func TestWarmupExcluded(t *testing.T) {
	t.Parallel()
	f := fake{}
	srv := f.start(t)
	o := opts(srv.URL)
	o.Warmup = 3
	var mu sync.Mutex
	var prog []Progress
	o.Progress = func(p Progress) { mu.Lock(); prog = append(prog, p); mu.Unlock() }
	res, err := run(t, o)
	if err != nil {
		t.Fatal(err)
	}
	if f.requests.Load() != 15 || res.RequestsOK != 12 || res.OutputTokens != 12*20 || len(res.Requests) != 12 {
		t.Fatalf("server saw %d, result ok %d tokens %d rows %d", f.requests.Load(), res.RequestsOK, res.OutputTokens, len(res.Requests))
	}
	last := prog[len(prog)-1]
	if !last.Final || last.Warmup || last.Done != 12 || last.OK != 12 || last.OutputTokens != 240 {
		t.Fatalf("last progress %+v", last)
	}
	if s := FormatProgress(last); !strings.HasPrefix(s, "12/12 requests (12 ok, 0 failed), ") || !strings.HasSuffix(s, "s") {
		t.Fatalf("progress line %q", s)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := fake{ChunkDelay: 5 * time.Millisecond}
	srv := f.start(t)
	o := opts(srv.URL)
	o.Prompts, o.Concurrency = 40, 2
	ctx, cancel := context.WithCancel(context.Background())
	o.Progress = func(p Progress) {
		if p.Done >= 2 {
			cancel()
		}
	}
	res, err := Run(ctx, o)
	if !errors.Is(err, context.Canceled) || res == nil {
		t.Fatalf("err %v", err)
	}
	if res.RequestsOK+res.RequestsFailed != 40 || res.RequestsFailed == 0 {
		t.Fatalf("ok %d + failed %d != 40", res.RequestsOK, res.RequestsFailed)
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Prompts: 1, InputLen: 1, OutputLen: 1},
		{URL: "http://127.0.0.1:1", InputLen: 1, OutputLen: 1},
		{URL: "http://127.0.0.1:1", Prompts: 1, OutputLen: 1},
		{URL: "http://127.0.0.1:1", Prompts: 1, InputLen: 1},
		{URL: "http://127.0.0.1:1", Prompts: 1, InputLen: 1, OutputLen: 1, Rate: -1},
		{URL: "http://127.0.0.1:1", Prompts: 1, InputLen: 1, OutputLen: 1, Concurrency: -1},
	} {
		if res, err := Run(context.Background(), o); err == nil || res != nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestStatsMath: a server with known timings: first token after 60ms, then
// one token every 15ms, 11 tokens, so TTFT 60, TPOT 15, ITL 15, E2E 210 at
// best. The definitions are checked exactly on the rows; timings only by the
// bounds the server's sleeps guarantee on any machine, however loaded (how
// close they come is BenchmarkStatsKnownServer's figure).
func TestStatsMath(t *testing.T) {
	t.Parallel()
	f := fake{FirstDelay: 60 * time.Millisecond, ChunkDelay: 15 * time.Millisecond}
	srv := f.start(t)
	o := opts(srv.URL)
	o.Prompts, o.Concurrency, o.OutputLen = 8, 4, 11
	res, err := run(t, o)
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want, tol float64) {
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %.6f, want %.6f ± %g", name, got, want, tol)
		}
	}
	if len(res.Requests) != 8 || res.RequestsOK != 8 {
		t.Fatalf("%d rows, %d ok; want 8 of 8", len(res.Requests), res.RequestsOK)
	}
	var sum, ttft, tpot, e2e float64
	for _, row := range res.Requests {
		if row.OutputTokens != 11 {
			t.Errorf("row %d: %d output tokens, want 11", row.Index, row.OutputTokens)
		}
		// The server sleeps 60ms before the first token and 15ms before
		// each of the 10 others: no client can see them sooner.
		if row.TTFTMs < 60 || row.E2EMs < 210 || row.E2EMs < row.TTFTMs {
			t.Errorf("row %d: TTFT %.1fms, E2E %.1fms; want TTFT >= 60, E2E >= 210 and >= TTFT", row.Index, row.TTFTMs, row.E2EMs)
		}
		near("row TPOT = (E2E - TTFT) / (tokens - 1)", row.TPOTMs, (row.E2EMs-row.TTFTMs)/10, 1e-9)
		sum += float64(row.OutputTokens)
		ttft += row.TTFTMs
		tpot += row.TPOTMs
		e2e += row.E2EMs
	}
	near("TTFT mean", res.TTFT.Mean, ttft/8, ttft/8*1e-5) // figures keep 6 significant digits
	near("TPOT mean", res.TPOT.Mean, tpot/8, tpot/8*1e-5)
	near("E2E mean", res.E2E.Mean, e2e/8, e2e/8*1e-5)
	near("tok/s = tokens / duration", res.OutputTokS, sum/res.DurationS, sum/res.DurationS*1e-5)
	// 8 requests on 4 slots: some slot serves two in a row, >= 420ms.
	if res.DurationS < 0.42 || res.OutputTokS > 88/0.42 {
		t.Errorf("duration %.3fs, %.1f tok/s; want >= 0.42s and <= %.1f tok/s", res.DurationS, res.OutputTokS, 88/0.42)
	}
	if res.ITL.P99 < res.ITL.P50 || res.TTFT.P99 < res.TTFT.P50 || res.TPOT.P99 < res.TPOT.P50 || res.E2E.P99 < res.E2E.P50 {
		t.Fatalf("percentiles out of order: %+v", res)
	}
}

// BenchmarkStatsKnownServer prints how close the measured timings come to
// those of TestStatsMath's server (TTFT 60, TPOT 15, ITL 15, E2E 210 ms,
// 66.7 tok/s per stream) on this machine.
func BenchmarkStatsKnownServer(b *testing.B) {
	f := fake{FirstDelay: 60 * time.Millisecond, ChunkDelay: 15 * time.Millisecond}
	srv := f.start(b)
	o := opts(srv.URL)
	o.Prompts, o.Concurrency, o.OutputLen = 8, 4, 11
	var res *Result
	for b.Loop() {
		var err error
		if res, err = Run(context.Background(), o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.TTFT.Mean, "ttft-ms")
	b.ReportMetric(res.TPOT.Mean, "tpot-ms")
	b.ReportMetric(res.ITL.P50, "itl-p50-ms")
	b.ReportMetric(res.E2E.Mean, "e2e-ms")
	b.ReportMetric(res.PerStreamTokS, "stream-tok/s")
}

func TestPoissonRate(t *testing.T) {
	t.Parallel()
	f := fake{}
	srv := f.start(t)
	o := opts(srv.URL)
	o.Rate, o.Prompts, o.Concurrency = 200, 20, 20
	res, err := run(t, o)
	if err != nil || res.RequestsOK != 20 {
		t.Fatalf("err %v res %+v", err, res)
	}
	// 19 gaps of mean 5ms: the last start is well after the first.
	var last float64
	for _, r := range res.Requests {
		last = math.Max(last, r.StartMs)
	}
	if last < 20 {
		t.Fatalf("last request started %.1fms after the first: arrivals not spread", last)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	v := []float64{1, 2, 3, 4}
	if p := percentile(v, 50); p != 2.5 {
		t.Fatalf("p50 %v", p)
	}
	if p := percentile(v, 99); math.Abs(p-3.97) > 1e-9 {
		t.Fatalf("p99 %v", p)
	}
	if s := statOf([]float64{5}); s != (Stat{5, 5, 5}) {
		t.Fatalf("one value %+v", s)
	}
}

func TestResultJSONAndTable(t *testing.T) {
	t.Parallel()
	r := &Result{OutputTokS: 1234.5, RequestsOK: 3, Settings: Settings{Steps: 3}, AcceptLen: 3.1, AcceptRate: 0.7,
		Model: "m", Concurrency: 8, TTFT: Stat{1, 2, 3}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"output_tok_s", "per_stream_tok_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "requests_ok",
		"requests_failed", "duration_s", "output_tokens", "accept_len", "accept_rate", "engine_accept_rate", "settings"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	if ttft := m["ttft_ms"].(map[string]any); ttft["mean"] != 1.0 || ttft["p50"] != 2.0 || ttft["p99"] != 3.0 {
		t.Errorf("ttft_ms %v", ttft)
	}
	tab := r.Table()
	for _, want := range []string{
		"============ Serving Benchmark Result ============\n",
		"Output token throughput (tok/s):         1234.50",
		"Max request concurrency:                 8",
		"---------------Time to First Token----------------\n",
		"Median TTFT (ms):                        2.00",
		"Accept rate (drafts accepted/proposed):  0.70",
		"==================================================\n",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
}
