package ops_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	labengine "github.com/opsbot/opsbot/lab/engine"
	"github.com/opsbot/opsbot/ops"
)

// BenchmarkTunePerLoad gives the figures of issue 24 for `mtp tune qwen
// per-load at 1,8,32,64` on the lab: the restarts it uses against the full
// grid of its range, and, at each concurrency 1..64, the tok/s of the
// proposed per-load configuration (the lab's SGLang running the proposed
// adaptive file) against the best single setting it found, both measured on
// a lab engine with the default physics in real time.
func BenchmarkTunePerLoad(b *testing.B) {
	r := newRig(b, labOpts(), func(c *ops.Config) {
		c.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 48}
	})
	var pl *ops.PerLoad
	restarts, tried := 0, 0
	for range b.N {
		ev := &events{}
		res, err := r.rb.TunePerLoad(testkit.Context(b, 60*time.Second), "qwen", ops.PerLoadOptions{At: []int{1, 8, 32, 64}, From: 1, To: 12}, ev)
		if err != nil {
			b.Fatalf("tune per load: %v\n%s", err, ev.text())
		}
		pl, restarts, tried = res.PerLoad, restarts+res.Restarts, tried+len(res.Tried)
	}
	b.ReportMetric(float64(restarts)/float64(b.N), "restarts/op")
	b.ReportMetric(float64(tried)/float64(b.N), "values/op")
	b.ReportMetric(float64(pl.GridRestarts), "grid-restarts")
	b.StopTimer()
	path := filepath.Join(b.TempDir(), "qwen-adaptive.json")
	if err := os.WriteFile(path, []byte(pl.FileText), 0o644); err != nil {
		b.Fatal(err)
	}
	base := "--model-path /models/Qwen3.5-122B-A10B --speculative-algorithm NEXTN --speculative-eagle-topk 1 "
	perLoad := fmt.Sprintf(base+"--speculative-num-steps %d --speculative-num-draft-tokens %d --speculative-adaptive --speculative-adaptive-config %s",
		pl.Steps, pl.Steps+1, path)
	single := fmt.Sprintf(base+"--speculative-num-steps %d --speculative-num-draft-tokens %d", pl.Single, pl.Single+1)
	var lines []string
	for _, c := range []int{1, 2, 4, 8, 16, 32, 48, 64} {
		p := streamTokS(b, perLoad, c)
		s := streamTokS(b, single, c)
		b.ReportMetric(p, fmt.Sprintf("perload-tok/s@%d", c))
		b.ReportMetric(s, fmt.Sprintf("single-tok/s@%d", c))
		lines = append(lines, fmt.Sprintf("concurrency %2d: per-load %7.1f tok/s, best single (steps %d) %7.1f tok/s, %+5.1f%%", c, p, pl.Single, s, 100*(p/s-1)))
	}
	b.Logf("per-load at 1,8,32,64: %d restarts for %d values (full grid %d)\n%s\n%s", restarts/b.N, tried/b.N, pl.GridRestarts,
		strings.Join(pl.Report()[:1], ""), strings.Join(lines, "\n"))
}

// streamTokS runs max(2*conc, 8) requests of 256 tokens (ignore_eos), conc
// at a time, on a lab SGLang started with flags and returns their aggregate
// output tok/s.
func streamTokS(b *testing.B, flags string, conc int) float64 {
	b.Helper()
	s, err := labengine.ParseArgv(append([]string{"python3", "-m", "sglang.launch_server"}, strings.Fields(flags)...))
	if err != nil {
		b.Fatal(err)
	}
	s, _, err = labengine.Check(s)
	if err != nil {
		b.Fatal(err)
	}
	e := labengine.New(s, labengine.Options{})
	srv := httptest.NewServer(e.Handler())
	defer func() { e.Close(); srv.Close() }()
	e.SetReady(true)
	body := `{"model":"x","prompt":[1,2,3,4,5,6,7,8],"max_tokens":256,"ignore_eos":true,"stream":true}`
	var wg sync.WaitGroup
	jobs := make(chan struct{}, max(2*conc, 8))
	for range cap(jobs) {
		jobs <- struct{}{}
	}
	close(jobs)
	t0 := time.Now()
	for range conc {
		wg.Go(func() {
			for range jobs {
				resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	return float64(e.Truth().OutputTokens) / el
}
