// Truth check against the lab's engine (lab/engine): what the benchmark
// measures must match what the engine emitted.

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

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

func TestAgainstLabEngine(t *testing.T) {
	const steps = 3
	argv := []string{"python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--port", "30000",
		"--speculative-algorithm", "EAGLE", "--speculative-num-steps", fmt.Sprint(steps),
		"--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", fmt.Sprint(steps + 1), "--enable-metrics"}
	s, err := labengine.ParseArgv(argv)
	if err != nil {
		t.Fatalf("ParseArgv: %v", err)
	}
	if s, _, err = labengine.Check(s); err != nil {
		t.Fatalf("Check: %v", err)
	}
	var mu sync.Mutex
	var lines []string
	eng := labengine.New(s, labengine.Options{Physics: labengine.DefaultPhysics(), Log: func(l string) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	}})
	defer eng.Close()
	eng.SetReady(true)
	srv := httptest.NewServer(eng.Handler())
	defer srv.Close()
	logs := func(ctx context.Context, since time.Time) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...), nil
	}
	for _, tc := range []struct{ conc, prompts, out int }{{1, 4, 200}, {8, 16, 150}, {64, 128, 100}} {
		t.Run(fmt.Sprintf("concurrency %d", tc.conc), func(t *testing.T) {
			mu.Lock()
			lines = nil
			mu.Unlock()
			before := readTruth(t, srv.URL)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			res, err := Run(ctx, Options{URL: srv.URL, Prompts: tc.prompts, Concurrency: tc.conc, InputLen: 64, OutputLen: tc.out,
				Timeout: time.Minute, DraftsPerStep: steps, Acceptance: SGLangAcceptance(engine.New(srv.URL), logs)})
			if err != nil {
				t.Fatal(err)
			}
			wall := time.Since(t0).Seconds() // the test's own clock, around the whole run
			after := readTruth(t, srv.URL)
			dTok, dSteps := after.OutputTokens-before.OutputTokens, after.VerifySteps-before.VerifySteps
			if float64(res.OutputTokens) != dTok || res.OutputTokens != tc.prompts*tc.out {
				t.Fatalf("output tokens %d, truth delta %v, asked %d", res.OutputTokens, dTok, tc.prompts*tc.out)
			}
			truthTokS := dTok / wall
			if math.Abs(res.OutputTokS-truthTokS)/truthTokS > 0.01 {
				t.Errorf("tok/s %.2f, truth %.2f", res.OutputTokS, truthTokS)
			}
			truthL := dTok / dSteps
			if math.Abs(res.AcceptLen-truthL)/truthL > 0.01 {
				t.Errorf("accept len %.4f (%s), truth %.4f", res.AcceptLen, res.AcceptSource, truthL)
			}
			t.Logf("concurrency %d: %.1f tok/s, %.1f per stream, accept len %.3f (truth %.3f) from %s, rate %.3f, engine %.3f",
				tc.conc, res.OutputTokS, res.PerStreamTokS, res.AcceptLen, truthL, res.AcceptSource, res.AcceptRate, res.EngineAcceptRate)
		})
	}
}

// BenchmarkAgainstLab512Streams runs 512 concurrent streams against the lab's
// engine (speculation on, --max-running-requests 512 so none queue) and
// reports the client's tok/s beside the engine's truth over the same wall
// window, and the process CPU (engine and client together: an upper bound of
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
		truthTokS := float64(t1.OutputTokens-t0.OutputTokens) / wall
		b.ReportMetric(res.OutputTokS, "client-tok/s")
		b.ReportMetric(truthTokS, "truth-tok/s")
		b.ReportMetric(chunks/wall, "chunks/s")
		b.ReportMetric(cpu/chunks*1e6, "process-cpu-s/Mchunk")
		if res.OutputTokens != 512*200 || float64(res.OutputTokens) != float64(t1.OutputTokens-t0.OutputTokens) {
			b.Fatalf("client counted %d tokens, engine emitted %d", res.OutputTokens, t1.OutputTokens-t0.OutputTokens)
		}
	}
}
