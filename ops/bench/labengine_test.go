// Truth check against the lab's engine (lab/engine): what the benchmark
// measures must match what the engine emitted.

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	labengine "github.com/opsbot/opsbot/lab/engine"
	"github.com/opsbot/opsbot/ops/engine"
)

type truth struct {
	OutputTokens float64 `json:"output_tokens"`
	VerifySteps  float64 `json:"verify_steps"`
	Requests     float64 `json:"requests"`
	AcceptLen    float64 `json:"accept_len"`
}

func readTruth(t *testing.T, base string) truth {
	t.Helper()
	resp, err := http.Get(base + "/lab/truth")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr truth
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
		t.Fatalf("/lab/truth: %v", err)
	}
	return tr
}

// labPhysics is DefaultPhysics' acceptance with steps about four times shorter, so that
// runs long enough for a 1% comparison stay short.
func labPhysics() labengine.Physics {
	p := labengine.DefaultPhysics()
	p.T0, p.C, p.BatchC, p.VerifyC, p.PrefillTok = 3*time.Millisecond, 400*time.Microsecond, 60*time.Microsecond, 40*time.Microsecond, 5*time.Microsecond
	return p
}

// startLab serves a ready lab engine (SGLang, EAGLE steps 3, topk 1) on loopback; log
// gets its log lines (nil = none).
func startLab(t testing.TB, log func(string), extra ...string) (*labengine.Engine, string) {
	argv := append([]string{"python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--port", "30000",
		"--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
		"--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--enable-metrics"}, extra...)
	s, err := labengine.ParseArgv(argv)
	if err != nil {
		t.Fatalf("ParseArgv: %v", err)
	}
	if s, _, err = labengine.Check(s); err != nil {
		t.Fatalf("Check: %v", err)
	}
	eng := labengine.New(s, labengine.Options{Physics: labPhysics(), Log: log})
	eng.SetReady(true)
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { srv.Close(); eng.Close() })
	return eng, srv.URL
}

// labTruth is what the engine saw of the requests that finished in a run.
type labTruth struct {
	tokens, steps   int64
	tokS            float64 // tokens over first arrival to last token
	ttft, tpot, itl float64 // means, ms; TPOT and ITL as the client defines them
	first, last     time.Time
	requests        int
}

// truthOf summarises reqs (the engine's per-request truth) with the client's definitions:
// TTFT from arrival to the first token, TPOT (last - first) / (tokens - 1), ITL the gaps
// between verify steps pooled over requests.
func truthOf(reqs []labengine.RequestTruth) labTruth {
	var lt labTruth
	var ttft, tpot, span float64
	var gaps int64
	nTPOT := 0
	for _, r := range reqs {
		lt.requests++
		lt.tokens += int64(r.OutputTokens)
		lt.steps += int64(r.VerifySteps)
		if lt.first.IsZero() || r.Received.Before(lt.first) {
			lt.first = r.Received
		}
		if r.LastToken.After(lt.last) {
			lt.last = r.LastToken
		}
		ttft += ms(r.FirstToken.Sub(r.Received))
		if r.OutputTokens > 1 {
			tpot += ms(r.LastToken.Sub(r.FirstToken)) / float64(r.OutputTokens-1)
			nTPOT++
		}
		span += ms(r.LastToken.Sub(r.FirstToken))
		gaps += int64(r.VerifySteps - 1)
	}
	lt.tokS = float64(lt.tokens) / lt.last.Sub(lt.first).Seconds()
	lt.ttft = ttft / float64(lt.requests)
	lt.tpot = tpot / float64(nTPOT)
	lt.itl = span / float64(gaps)
	return lt
}

func relErr(got, want float64) float64 { return math.Abs(got-want) / want }

// TestAgainstLabEngine compares what the client measures with what the lab's engine
// recorded per request (arrival, first and last token, tokens, verify steps) at
// concurrency 1, 8 and 64 (64 queues behind SGLang's cap of 48 running requests): tokens
// exact; tok/s within 1%; TTFT, TPOT and ITL means within loopback's delivery cost; accept
// length over the window, measured as over plain HTTP (/flush_cache, then /server_info),
// within 1% of the engine's truth delta.
func TestAgainstLabEngine(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	const steps = 3
	eng, url := startLab(t, nil)
	for _, tc := range []struct{ conc, prompts, out int }{{1, 12, 256}, {8, 48, 256}, {64, 256, 128}} {
		t.Run(fmt.Sprintf("concurrency %d", tc.conc), func(t *testing.T) {
			before := readTruth(t, url)
			n0 := len(eng.Requests())
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := Run(ctx, Options{URL: url, Prompts: tc.prompts, Concurrency: tc.conc, InputLen: 64, OutputLen: tc.out,
				Timeout: time.Minute, DraftsPerStep: steps, Acceptance: SGLangAcceptance(engine.New(url), nil)})
			if err != nil {
				t.Fatal(err)
			}
			after := readTruth(t, url)
			reqs := eng.Requests()[n0:]
			tr := truthOf(reqs)
			if tr.requests != tc.prompts || res.OutputTokens != tc.prompts*tc.out || int64(res.OutputTokens) != tr.tokens ||
				float64(tr.tokens) != after.OutputTokens-before.OutputTokens {
				t.Fatalf("output tokens %d, engine %d in %d requests, asked %d", res.OutputTokens, tr.tokens, tr.requests, tc.prompts*tc.out)
			}
			var itlN int
			for _, row := range res.Requests {
				itlN += row.Chunks - 1
			}
			if int64(itlN) != tr.steps-int64(tr.requests) {
				t.Errorf("client saw %d gaps between chunks, engine made %d verify steps in %d requests", itlN, tr.steps, tr.requests)
			}
			if e := relErr(res.OutputTokS, tr.tokS); e > 0.01 {
				t.Errorf("tok/s %.2f, engine %.2f: off by %.2f%%", res.OutputTokS, tr.tokS, 100*e)
			}
			// The client sees each time a little after the engine: the HTTP request's trip
			// before arrival, the chunk's write and read after the step, which grow with the
			// streams two cores serve at once, and with whatever else the machine
			// runs. Allow 2 ms and 10% of that: a client timing from the wrong
			// moment is off by far more.
			if d := res.TTFT.Mean - tr.ttft; d < -0.2 || d > 2+0.10*tr.ttft {
				t.Errorf("TTFT mean %.3f ms, engine %.3f ms", res.TTFT.Mean, tr.ttft)
			}
			if e := relErr(res.TPOT.Mean, tr.tpot); e > 0.03 {
				t.Errorf("TPOT mean %.4f ms, engine %.4f ms: off by %.2f%%", res.TPOT.Mean, tr.tpot, 100*e)
			}
			if e := relErr(res.ITL.Mean, tr.itl); e > 0.03 {
				t.Errorf("ITL mean %.4f ms, engine %.4f ms: off by %.2f%%", res.ITL.Mean, tr.itl, 100*e)
			}
			truthL := float64(tr.tokens) / float64(tr.steps)
			if res.AcceptSource != SourceSGLangFlush || !res.AcceptOverWindow {
				t.Errorf("accept source %q (over the window: %v), want %q", res.AcceptSource, res.AcceptOverWindow, SourceSGLangFlush)
			}
			if e := relErr(res.AcceptLen, truthL); e > 0.01 {
				t.Errorf("accept len %.4f (%s), truth %.4f: off by %.2f%%", res.AcceptLen, res.AcceptSource, truthL, 100*e)
			}
			if e := relErr(res.AcceptRate, (truthL-1)/steps); e > 0.01 {
				t.Errorf("accept rate %.4f, truth %.4f", res.AcceptRate, (truthL-1)/steps)
			}
			t.Logf("concurrency %d: tok/s %.1f (engine %.1f, %+.3f%%), TTFT %.3f ms (engine %.3f), TPOT %.4f ms (engine %.4f, %+.2f%%), ITL %.4f ms (engine %.4f, %+.2f%%), accept len %.4f (truth %.4f, %+.3f%%)",
				tc.conc, res.OutputTokS, tr.tokS, 100*(res.OutputTokS/tr.tokS-1), res.TTFT.Mean, tr.ttft, res.TPOT.Mean, tr.tpot, 100*(res.TPOT.Mean/tr.tpot-1),
				res.ITL.Mean, tr.itl, 100*(res.ITL.Mean/tr.itl-1), res.AcceptLen, truthL, 100*(res.AcceptLen/truthL-1))
		})
	}
}

// BenchmarkAgainstLab512Streams runs 512 concurrent streams against the lab's
// engine (speculation on, --max-running-requests 512 so none queue) and
// reports the client's tok/s beside the engine's per-request truth (first
// arrival to last token), and the process CPU (engine and client together: an upper bound of
// the client's share) per million streamed chunks (one chunk per verify step).
func BenchmarkAgainstLab512Streams(b *testing.B) {
	argv := []string{"python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
		"--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
		"--speculative-num-draft-tokens", "4", "--max-running-requests", "512"}
	s, err := labengine.ParseArgv(argv)
	if err != nil {
		b.Fatal(err)
	}
	if s, _, err = labengine.Check(s); err != nil {
		b.Fatal(err)
	}
	eng := labengine.New(s, labengine.Options{Physics: labengine.DefaultPhysics()})
	defer eng.Close()
	eng.SetReady(true)
	srv := httptest.NewServer(eng.Handler())
	defer srv.Close()
	for i := 0; i < b.N; i++ {
		t0 := eng.Truth()
		n0 := len(eng.Requests())
		cpu0 := cpuSelf()
		w0 := time.Now()
		res, err := Run(context.Background(), Options{URL: srv.URL, Prompts: 512, Concurrency: 512, InputLen: 16, OutputLen: 200, Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		wall := time.Since(w0).Seconds()
		cpu := (cpuSelf() - cpu0).Seconds()
		t1 := eng.Truth()
		chunks := float64(t1.VerifySteps - t0.VerifySteps)
		truthTokS := truthOf(eng.Requests()[n0:]).tokS
		b.ReportMetric(res.OutputTokS, "client-tok/s")
		b.ReportMetric(truthTokS, "truth-tok/s")
		b.ReportMetric(chunks/wall, "chunks/s")
		b.ReportMetric(cpu/chunks*1e6, "process-cpu-s/Mchunk")
		if res.OutputTokens != 512*200 || float64(res.OutputTokens) != float64(t1.OutputTokens-t0.OutputTokens) {
			b.Fatalf("client counted %d tokens, engine emitted %d", res.OutputTokens, t1.OutputTokens-t0.OutputTokens)
		}
	}
}

// TestAcceptanceFromDecodeLog: when the engine refuses to flush (a neighbour's request is
// running), acceptance comes from the decode log lines of the window, as a job reads them
// from the journal, and is still within 1% of the engine's truth over the window (the
// neighbour's tokens included: they are in the engine's figures too).
func TestAcceptanceFromDecodeLog(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lines []string
	eng, url := startLab(t, func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() })
	logs := func(ctx context.Context, since time.Time) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...), nil
	}
	nctx, stop := context.WithCancel(context.Background())
	defer stop()
	req, _ := http.NewRequestWithContext(nctx, http.MethodPost, url+"/v1/completions",
		strings.NewReader(`{"prompt":"neighbour","max_tokens":30000,"ignore_eos":true,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	go io.Copy(io.Discard, resp.Body)
	testkit.WaitFor(t, 10*time.Second, "the neighbour's request to run", func() bool { return eng.Truth().BatchSteps != 0 })
	before := eng.Truth()
	res, err := Run(context.Background(), Options{URL: url, Prompts: 48, Concurrency: 8, InputLen: 64, OutputLen: 256,
		Timeout: time.Minute, DraftsPerStep: 3, Acceptance: SGLangAcceptance(engine.New(url), logs)})
	if err != nil {
		t.Fatal(err)
	}
	after := eng.Truth()
	stop()
	truthL := float64(after.OutputTokens-before.OutputTokens) / float64(after.VerifySteps-before.VerifySteps)
	if !strings.HasPrefix(res.AcceptSource, SourceSGLangLog) || !res.AcceptOverWindow {
		t.Fatalf("accept source %q, want the decode log (errors %q)", res.AcceptSource, res.Errors)
	}
	if e := relErr(res.AcceptLen, truthL); e > 0.01 {
		t.Errorf("accept len %.4f, truth %.4f: off by %.2f%%", res.AcceptLen, truthL, 100*e)
	}
	if e := relErr(res.AcceptRate, (truthL-1)/3); e > 0.01 {
		t.Errorf("accept rate %.4f, truth %.4f", res.AcceptRate, (truthL-1)/3)
	}
	t.Logf("accept len %.4f (truth %.4f, %+.3f%%) from %s; engine's printed rate %.4f", res.AcceptLen, truthL, 100*(res.AcceptLen/truthL-1), res.AcceptSource, res.EngineAcceptRate)
}

// TestAcceptanceNotMeasured: an engine that gives nothing over the window (no flush, no
// metrics, no decode line yet) leaves accept_len 0 and says why, naming the window.
func TestAcceptanceNotMeasured(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/server_info" {
			io.WriteString(w, `{"speculative_num_steps":3,"internal_states":[{}]}`)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	a := SGLangAcceptance(engine.New(srv.URL), nil)
	a.Begin(context.Background())
	_, err := a.End(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not measured over the window") || !strings.Contains(err.Error(), "flush") {
		t.Fatalf("err %v", err)
	}
}

// TestAcceptanceRunShorterThanAWindow: a run shorter than one decode-log window leaves
// nothing over the window after the flush: accept_len and accept_rate are unknown (not 0),
// and the result says why (the cause, for the caller to name its remedy).
func TestAcceptanceRunShorterThanAWindow(t *testing.T) {
	t.Parallel()
	_, url := startLab(t, nil)
	res, err := Run(context.Background(), Options{URL: url, Prompts: 1, Concurrency: 1, InputLen: 16, OutputLen: 20,
		Timeout: time.Minute, DraftsPerStep: 3, Acceptance: SGLangAcceptance(engine.New(url), nil)})
	if err != nil {
		t.Fatal(err)
	}
	msg := strings.Join(res.Errors, "\n")
	if Known(res.AcceptLen) || Known(res.AcceptRate) || res.AcceptOverWindow || !strings.Contains(msg, "not measured over the window") ||
		!strings.Contains(msg, "shorter than one decode-log window (40 decode iterations)") ||
		res.AcceptCause != CauseShortRun || res.AcceptUnknown != "the run was shorter than one decode-log window (40 decode iterations)" {
		t.Fatalf("accept len %v (%s), errors:\n%s", res.AcceptLen, res.AcceptSource, msg)
	}
}
