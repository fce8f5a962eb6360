package ops_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
)

// labTruth reads the lab engine's ground truth (tokens emitted, verify steps).
func labTruth(t *testing.T, url string) (tokens, steps float64) {
	t.Helper()
	resp, err := http.Get(url + "/lab/truth")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr struct {
		OutputTokens float64 `json:"output_tokens"`
		VerifySteps  float64 `json:"verify_steps"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
		t.Fatalf("%s/lab/truth: %v", url, err)
	}
	return tr.OutputTokens, tr.VerifySteps
}

// TestBenchAcceptanceOverWindow: a `bench` job on the lab's qwen measures acceptance over
// its window, within 1% of the engine's truth over the job: through /flush_cache and
// /server_info when the engine is idle at the start; from the unit's decode log lines, read
// from the journal over SSH, when another client's request keeps the engine from flushing.
func TestBenchAcceptanceOverWindow(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, labOpts(), nil)
	url := r.svc.URL
	bp := ops.BenchParams{Prompts: 8, Concurrency: 2, InputLen: 32, OutputLen: 256}
	for _, tc := range []struct {
		name, source string
		neighbour    bool
	}{{"idle engine", bench.SourceSGLangFlush, false}, {"busy engine", bench.SourceSGLangLog, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testkit.Context(t, 60*time.Second)
			if tc.neighbour {
				nctx, stop := context.WithCancel(ctx)
				defer stop()
				req, _ := http.NewRequestWithContext(nctx, http.MethodPost, url+"/v1/completions",
					strings.NewReader(`{"prompt":"another client","max_tokens":30000,"ignore_eos":true,"stream":true}`))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				first := make([]byte, 1)
				if _, err := io.ReadFull(resp.Body, first); err != nil { // it is running
					t.Fatal(err)
				}
				go io.Copy(io.Discard, resp.Body)
			}
			tok0, steps0 := labTruth(t, url)
			ev := &events{}
			res, err := r.rb.Bench(ctx, "qwen", bp, false, ev)
			if err != nil {
				t.Fatalf("bench: %v\n%s", err, ev.text())
			}
			tok1, steps1 := labTruth(t, url)
			b := res.Bench
			if b == nil {
				t.Fatalf("no benchmark result\n%s", ev.text())
			}
			truth := (tok1 - tok0) / (steps1 - steps0)
			if !strings.HasPrefix(b.AcceptSource, tc.source) || !b.AcceptOverWindow {
				t.Fatalf("accept source %q (over the window: %v), want %q\n%s", b.AcceptSource, b.AcceptOverWindow, tc.source, ev.text())
			}
			if e := math.Abs(b.AcceptLen-truth) / truth; e > 0.01 {
				t.Errorf("accept len %.4f, truth over the job %.4f: off by %.2f%%", b.AcceptLen, truth, 100*e)
			}
			if strings.Contains(res.Summary, "not measured over the window") {
				t.Errorf("summary %q", res.Summary)
			}
			t.Logf("%s: accept len %.4f, truth %.4f (%+.3f%%), from %s", tc.name, b.AcceptLen, truth, 100*(b.AcceptLen/truth-1), b.AcceptSource)
		})
	}
}

// TestBenchTooShortForAWindow: a benchmark shorter than one decode-log window measures no
// acceptance over it: the summary shows its accept length as unknown ("—", never 0.00) with
// why, once; the thread warns nothing about it (the job's result says it in one line with
// the config key to change: report.UnknownNotes), and the result's JSON has null.
func TestBenchTooShortForAWindow(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(), nil)
	ev := &events{}
	res, err := r.rb.Bench(testkit.Context(t, 60*time.Second), "qwen", ops.BenchParams{Prompts: 1, Concurrency: 1, InputLen: 16, OutputLen: 20}, false, ev)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, ev.text())
	}
	why := "accept len — (the run was shorter than one decode-log window (40 decode iterations))"
	if !strings.Contains(res.Summary, why) || strings.Count(res.Summary, "decode-log window") != 1 || strings.Contains(res.Summary, "0.00") {
		t.Errorf("summary %q, want %q", res.Summary, why)
	}
	if strings.Contains(ev.text(), "warning") || strings.Contains(ev.text(), "benchmark more prompts") {
		t.Errorf("the thread warns about the window:\n%s", ev.text())
	}
	if b, err := json.Marshal(res.Bench); err != nil || !strings.Contains(string(b), `"accept_len":null`) || !strings.Contains(string(b), `"accept_cause":"short_run"`) {
		t.Errorf("bench JSON %s (%v)", b, err)
	}
}
