package store

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"
)

func testBenchResults(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	job := mustCreate(t, s, Job{Command: "bench qwen"})
	at := time.Date(2026, 12, 2, 18, 30, 0, 987654321, time.UTC)
	r1, err := s.AddBenchResult(ctx, BenchResult{
		JobID: job.ID, Service: "qwen", Settings: "steps=3,topk=1,draft=4", At: at,
		OutputTokS: 210.5, PerStreamTokS: 52.25, AcceptLen: 3.12, AcceptRate: math.NaN(),
		RequestsOK: 64, RequestsFailed: 1, Concurrency: 16, Raw: json.RawMessage(`{"ttft_ms":[1,2]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r1.ID <= 0 {
		t.Fatalf("no ID: %+v", r1)
	}
	r2 := must(s.AddBenchResult(ctx, BenchResult{Service: "qwen", Settings: "steps=10,topk=1,draft=11", OutputTokS: 280}))(t)
	r3 := must(s.AddBenchResult(ctx, BenchResult{Service: "qwen", Settings: "steps=3,topk=1,draft=4", OutputTokS: 215}))(t)
	r4 := must(s.AddBenchResult(ctx, BenchResult{Service: "llama", Settings: "steps=3,topk=1,draft=4", OutputTokS: 99}))(t)

	prev, err := s.PreviousBenchResult(ctx, "qwen", "steps=3,topk=1,draft=4", r3.ID)
	if err != nil {
		t.Fatal(err)
	}
	if prev.ID != r1.ID || prev.JobID != job.ID || prev.OutputTokS != 210.5 || prev.PerStreamTokS != 52.25 ||
		prev.AcceptLen != 3.12 || !math.IsNaN(prev.AcceptRate) || prev.RequestsOK != 64 || prev.RequestsFailed != 1 ||
		prev.Concurrency != 16 || string(prev.Raw) != `{"ttft_ms":[1,2]}` {
		t.Errorf("previous result read back as %+v, want %+v", prev, r1)
	}
	sameTime(t, "bench At", prev.At, at)
	if p, err := s.PreviousBenchResult(ctx, "qwen", "", r3.ID); err != nil || p.ID != r2.ID {
		t.Errorf("previous of any settings = %+v, %v; want %d", p, err, r2.ID)
	}
	if p, err := s.PreviousBenchResult(ctx, "qwen", "steps=3,topk=1,draft=4", 0); err != nil || p.ID != r3.ID {
		t.Errorf("newest = %+v, %v; want %d", p, err, r3.ID)
	}
	if _, err := s.PreviousBenchResult(ctx, "qwen", "steps=3,topk=1,draft=4", r1.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("previous of the first = %v, want ErrNotFound", err)
	}
	if _, err := s.PreviousBenchResult(ctx, "nope", "", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("previous of unknown service = %v, want ErrNotFound", err)
	}

	hist, err := s.BenchHistory(ctx, "qwen", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 3 || hist[0].ID != r3.ID || hist[2].ID != r1.ID {
		t.Errorf("history = %+v, want r3, r2, r1", hist)
	}
	if h := must(s.BenchHistory(ctx, "", 2))(t); len(h) != 2 || h[0].ID != r4.ID {
		t.Errorf("history of all, limit 2 = %+v", h)
	}
	if h := must(s.BenchHistory(ctx, "qwen", 0))(t); h[1].Raw != nil || h[1].JobID != 0 || h[1].AcceptLen != 0 {
		t.Errorf("unset fields read back wrong: %+v", h[1])
	}
	latest := must(s.LatestBench(ctx))(t)
	if len(latest) != 2 || latest["qwen"].ID != r3.ID || latest["qwen"].OutputTokS != 215 || latest["llama"].ID != r4.ID {
		t.Errorf("latest by service = %+v, want qwen's r3 and llama's r4", latest)
	}
}

func TestBenchResults(t *testing.T) { t.Parallel(); eachDriver(t, testBenchResults) }

func testBenchResultRejectsBadInput(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	ok := BenchResult{Service: "qwen", Settings: "steps=3"}
	for name, mod := range map[string]func(*BenchResult){
		"no service":   func(r *BenchResult) { r.Service = "" },
		"no settings":  func(r *BenchResult) { r.Settings = " " },
		"inf":          func(r *BenchResult) { r.OutputTokS = math.Inf(1) },
		"neg count":    func(r *BenchResult) { r.RequestsFailed = -1 },
		"neg conc":     func(r *BenchResult) { r.Concurrency = -1 },
		"bad raw":      func(r *BenchResult) { r.Raw = json.RawMessage(`[`) },
		"has id":       func(r *BenchResult) { r.ID = 3 },
		"neg job":      func(r *BenchResult) { r.JobID = -3 },
		"bad time":     func(r *BenchResult) { r.At = time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC) },
		"missing job*": nil,
	} {
		r := ok
		if mod == nil {
			r.JobID = 999
			if _, err := s.AddBenchResult(ctx, r); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: err = %v, want ErrNotFound", name, err)
			}
			continue
		}
		mod(&r)
		if _, err := s.AddBenchResult(ctx, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if n := count(t, s.rdb, "bench_results"); n != 0 {
		t.Errorf("rejected results were written: %d", n)
	}
}

func TestBenchResultRejectsBadInput(t *testing.T) {
	t.Parallel()
	eachDriver(t, testBenchResultRejectsBadInput)
}

// The comparable runs of a result are those of the same service, settings and
// load, newest first, at most n, the judged job's own left out.
func testRecentAtLoadAndMedian(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	load := Load{Prompts: 16, Concurrency: 4, InputLen: 256, OutputLen: 256}
	add := func(job int64, svc, settings string, l Load, tok float64) BenchResult {
		return must(s.AddBenchResult(ctx, BenchResult{JobID: job, Service: svc, Settings: settings, OutputTokS: tok,
			Prompts: l.Prompts, Concurrency: l.Concurrency, InputLen: l.InputLen, OutputLen: l.OutputLen}))(t)
	}
	const key = "steps=10,topk=1,draft=11"
	for i, tok := range []float64{100, 300, 200, 250, 150} {
		add(0, "qwen", key, load, tok+float64(i))
	}
	other := load
	other.Concurrency = 8
	add(0, "qwen", key, other, 999)                     // another load
	add(0, "qwen", "steps=3,topk=1,draft=4", load, 999) // other settings
	add(0, "coder", key, load, 999)                     // another service
	job := mustCreate(t, s, Job{Command: "bench qwen"})
	add(job.ID, "qwen", key, load, 1) // the judged job's own result

	rs, err := s.RecentAtLoad(ctx, "qwen", key, load, job.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, r := range rs {
		got = append(got, r.OutputTokS)
	}
	if len(got) != 3 || got[0] != 154 || got[1] != 253 || got[2] != 202 {
		t.Fatalf("recent = %v, want the newest three comparable runs [154 253 202]", got)
	}
	if m, ok := MedianOutputTokS(rs); !ok || m != 202 {
		t.Errorf("median of %v = %v %v, want 202", got, m, ok)
	}
	all, _ := s.RecentAtLoad(ctx, "qwen", key, load, job.ID, 0)
	if m, _ := MedianOutputTokS(all); len(all) != 5 || m != 202 {
		t.Errorf("default n: %d results, median %v; want 5 and 202", len(all), m)
	}
	withOwn, _ := s.RecentAtLoad(ctx, "qwen", key, load, 0, 10)
	if len(withOwn) != 6 || withOwn[0].OutputTokS != 1 {
		t.Errorf("excludeJob 0 left a result out: %d", len(withOwn))
	}
	if rs, err := s.RecentAtLoad(ctx, "qwen", key, Load{}, 0, 7); err != nil || len(rs) != 0 {
		t.Errorf("an unknown load matched %d results (%v)", len(rs), err)
	}
	if m, ok := MedianOutputTokS([]BenchResult{{OutputTokS: 4}, {OutputTokS: math.NaN()}, {OutputTokS: 2}}); !ok || m != 3 {
		t.Errorf("median of 4, NaN, 2 = %v %v, want 3", m, ok)
	}
	if _, ok := MedianOutputTokS(nil); ok {
		t.Error("median of nothing is ok")
	}
}

func TestRecentAtLoadAndMedian(t *testing.T) { t.Parallel(); eachDriver(t, testRecentAtLoadAndMedian) }
