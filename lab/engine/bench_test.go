package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// streamAll runs n concurrent streaming requests of maxTokens and returns the chunks read.
func streamAll(b *testing.B, client *http.Client, url string, n, maxTokens int) int64 {
	var chunks atomic.Int64
	var wg sync.WaitGroup
	body := fmt.Sprintf(`{"prompt":[1,2,3,4,5,6,7,8],"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, maxTokens)
	for range n {
		wg.Go(func() {
			resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			c := int64(0)
			for sc.Scan() {
				if line := sc.Bytes(); bytes.HasPrefix(line, []byte("data: {")) {
					c++
				}
			}
			chunks.Add(c)
		})
	}
	wg.Wait()
	return chunks.Load()
}

// BenchmarkStreams512 measures the engine's capacity: 512 concurrent SSE streams over loopback
// with 2ms verify steps (steps 3), reporting chunks/s delivered (client included).
func BenchmarkStreams512(b *testing.B) {
	const streams = 512
	s, err := ParseArgv(sglangArgv("--model-path /m --speculative-algorithm NEXTN --speculative-num-steps 3 " +
		"--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --max-running-requests 512 --chunked-prefill-size 65536"))
	if err != nil {
		b.Fatal(err)
	}
	p := Physics{Accept: 0.7, T0: 2 * time.Millisecond, Seed: 1}
	e := New(s, Options{Physics: p})
	srv := httptest.NewServer(e.Handler())
	defer func() { e.Close(); srv.Close() }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}}
	b.ResetTimer()
	start := time.Now()
	var chunks int64
	for range b.N {
		chunks += streamAll(b, client, srv.URL, streams, 400)
	}
	el := time.Since(start).Seconds()
	tr := e.Truth()
	b.ReportMetric(float64(chunks)/el, "chunks/s")
	b.ReportMetric(float64(tr.OutputTokens)/el, "tok/s")
	b.ReportMetric(streams, "streams")
	b.ReportMetric(float64(tr.BatchSteps)/el, "steps/s")
}

// BenchmarkIncidentSingleStream reports one stream's decode speed under DefaultPhysics for
// the incident's steps 3 and steps 10 (topk 1): real time, as a benchmark would see it.
func BenchmarkIncidentSingleStream(b *testing.B) {
	for _, steps := range []int{3, 10} {
		b.Run(fmt.Sprintf("steps=%d", steps), func(b *testing.B) {
			s, err := ParseArgv(sglangArgv(fmt.Sprintf("--model-path /m --speculative-algorithm NEXTN --speculative-num-steps %d "+
				"--speculative-eagle-topk 1 --speculative-num-draft-tokens %d", steps, steps+1)))
			if err != nil {
				b.Fatal(err)
			}
			e := New(s, Options{Physics: DefaultPhysics()})
			srv := httptest.NewServer(e.Handler())
			defer func() { e.Close(); srv.Close() }()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				streamAll(b, http.DefaultClient, srv.URL, 1, 600)
			}
			b.ReportMetric(float64(e.Truth().OutputTokens)/time.Since(start).Seconds(), "tok/s")
			b.ReportMetric(e.Truth().AcceptLen, "accept_len")
		})
	}
}

// BenchmarkStepsByConcurrency prints the lab's measured output tok/s (DefaultPhysics, real
// time, over loopback) of each speculative setting at concurrency 1, 8, 32 and 64: one round
// of that many requests of 200 tokens (ignore_eos), from the first dispatch to the last
// token. "off" runs without speculation; "adaptive 0" is SGLang's adaptive step 0 alone
// (cap raised to 64); "default table" is SGLang's default adaptive table at the cap of 48
// and raised to 64; the static steps run at SGLang's cap of 48 with speculation on.
// Run: go test -tags goolm -run '^$' -bench StepsByConcurrency -benchtime 1x ./lab/engine/
func BenchmarkStepsByConcurrency(b *testing.B) {
	base := "--model-path /m --chunked-prefill-size 65536 "
	spec := base + "--speculative-algorithm NEXTN --speculative-eagle-topk 1 "
	zero := filepath.Join(b.TempDir(), "zero.json")
	if err := os.WriteFile(zero, []byte(`{"1": {"candidate_steps": [0]}}`), 0o644); err != nil {
		b.Fatal(err)
	}
	rows := [][2]string{{"off", base}, {"adaptive 0 @64", spec + "--speculative-num-steps 0 --max-running-requests 64 --speculative-adaptive --speculative-adaptive-config " + zero},
		{"default table @48", spec + "--speculative-num-steps 3 --speculative-adaptive"},
		{"default table @64", spec + "--speculative-num-steps 3 --speculative-adaptive --max-running-requests 64"}}
	for k := 1; k <= 12; k++ {
		rows = append(rows, [2]string{fmt.Sprintf("steps %d", k), spec + fmt.Sprintf("--speculative-num-steps %d --speculative-num-draft-tokens %d", k, k+1)})
	}
	out := []string{fmt.Sprintf("%-18s %8s %8s %8s %8s", "tok/s", "c=1", "c=8", "c=32", "c=64")}
	for range b.N {
		for _, r := range rows {
			line := fmt.Sprintf("%-18s", r[0])
			for _, c := range []int{1, 8, 32, 64} {
				line += fmt.Sprintf(" %8.0f", measureTokS(b, r[1], c))
			}
			out = append(out, line)
		}
	}
	b.Logf("lab engine, DefaultPhysics, 200 tokens per request:\n%s", strings.Join(out, "\n"))
}

// measureTokS starts a lab engine with flags and returns the output tok/s of conc streams.
func measureTokS(b *testing.B, flags string, conc int) float64 {
	b.Helper()
	s, err := ParseArgv(sglangArgv(flags))
	if err != nil {
		b.Fatal(err)
	}
	if s, _, err = Check(s); err != nil {
		b.Fatal(err)
	}
	e := New(s, Options{Physics: DefaultPhysics()})
	srv := httptest.NewServer(e.Handler())
	defer func() { e.Close(); srv.Close() }()
	e.SetReady(true)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	start := time.Now()
	streamAll(b, client, srv.URL, conc, 200)
	return float64(e.Truth().OutputTokens) / time.Since(start).Seconds()
}
