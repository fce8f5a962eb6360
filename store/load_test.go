package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// A result is compared only with one of the same service, settings and load
// (prompts, concurrency, in, out); a result whose load is unknown (stored
// before the load was) is never compared.
func testPreviousAtLoadIsLikeForLike(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx := context.Background()
	a := Load{Prompts: 16, Concurrency: 1, InputLen: 256, OutputLen: 256}
	b := Load{Prompts: 100, Concurrency: 8, InputLen: 512, OutputLen: 256}
	add := func(service, settings string, l Load, tok float64) BenchResult {
		t.Helper()
		r, err := s.AddBenchResult(ctx, BenchResult{Service: service, Settings: settings, OutputTokS: tok,
			Prompts: l.Prompts, Concurrency: l.Concurrency, InputLen: l.InputLen, OutputLen: l.OutputLen})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := add("qwen", "steps=3", a, 100)
	add("qwen", "steps=3", b, 900)     // another load
	add("coder", "steps=3", a, 50)     // another service
	add("qwen", "steps=3", Load{}, 70) // unknown load
	add("qwen", "steps=10", a, 120)    // other settings
	cur := add("qwen", "steps=3", a, 110)

	got, err := s.PreviousAtLoad(ctx, "qwen", "steps=3", a, cur.ID, 0)
	if err != nil || got.ID != first.ID {
		t.Fatalf("same settings and load: got #%d (%v), want #%d", got.ID, err, first.ID)
	}
	if got.Load() != a {
		t.Errorf("load read back %+v, want %+v", got.Load(), a)
	}
	if got, err := s.PreviousAtLoad(ctx, "qwen", "", a, cur.ID, 0); err != nil || got.Settings != "steps=10" {
		t.Errorf("any settings at the load: got %+v (%v), want the steps=10 result", got, err)
	}
	if _, err := s.PreviousAtLoad(ctx, "qwen", "steps=3", Load{Prompts: 16, Concurrency: 2, InputLen: 256, OutputLen: 256}, 0, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("another concurrency: %v, want ErrNotFound", err)
	}
	if _, err := s.PreviousAtLoad(ctx, "qwen", "steps=3", Load{}, 0, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown load: %v, want ErrNotFound", err)
	}
	if _, err := s.AddBenchResult(ctx, BenchResult{Service: "qwen", Settings: "x", Prompts: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative prompts: %v, want ErrInvalid", err)
	}
}

func TestPreviousAtLoadIsLikeForLike(t *testing.T) {
	t.Parallel()
	eachDriver(t, testPreviousAtLoadIsLikeForLike)
}

// A job's result is compared with another run's, never with a result of
// the same job (a job that benchmarks one setting at one load twice, or
// stores a figure twice): excludeJob leaves them out; a result of no job
// (opsbot bench) is another run.
func testPreviousAtLoadLeavesOutTheJob(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx := context.Background()
	a := Load{Prompts: 16, Concurrency: 1, InputLen: 256, OutputLen: 256}
	add := func(job int64, tok float64) BenchResult {
		t.Helper()
		r, err := s.AddBenchResult(ctx, BenchResult{JobID: job, Service: "qwen", Settings: "steps=3", OutputTokS: tok,
			Prompts: a.Prompts, Concurrency: a.Concurrency, InputLen: a.InputLen, OutputLen: a.OutputLen})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	j8, j9 := mustCreate(t, s, Job{Command: "bench qwen"}), mustCreate(t, s, Job{Command: "mtp per-load qwen 1:3"})
	none := add(0, 90)
	earlier := add(j8.ID, 100)
	add(j9.ID, 110)
	cur := add(j9.ID, 110)
	if got, err := s.PreviousAtLoad(ctx, "qwen", "steps=3", a, cur.ID, j9.ID); err != nil || got.ID != earlier.ID {
		t.Fatalf("previous of job #%d: got #%d of job #%d (%v), want #%d of job #%d", j9.ID, got.ID, got.JobID, err, earlier.ID, j8.ID)
	}
	if got, err := s.PreviousAtLoad(ctx, "qwen", "steps=3", a, earlier.ID, j8.ID); err != nil || got.ID != none.ID {
		t.Errorf("previous of job #%d: got #%d (%v), want the result of no job #%d", j8.ID, got.ID, err, none.ID)
	}
}

func TestPreviousAtLoadLeavesOutTheJob(t *testing.T) {
	t.Parallel()
	eachDriver(t, testPreviousAtLoadLeavesOutTheJob)
}

// BenchmarkPreviousAtLoad reads the like-for-like result a new benchmark is
// compared with, among 10,000 results of one service at four loads and
// five settings (the bench_by_load index).
func BenchmarkPreviousAtLoad(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	loads := []Load{{16, 1, 256, 256}, {100, 8, 512, 256}, {200, 16, 1024, 256}, {16, 4, 256, 128}}
	for i := 0; i < 10000; i++ {
		l := loads[i%len(loads)]
		if _, err := s.AddBenchResult(ctx, BenchResult{Service: "qwen", Settings: fmt.Sprintf("steps=%d", i%5+1), OutputTokS: 1,
			Prompts: l.Prompts, Concurrency: l.Concurrency, InputLen: l.InputLen, OutputLen: l.OutputLen}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.PreviousAtLoad(ctx, "qwen", "steps=3", loads[1], 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecentAtLoadMedian reads the 7 comparable runs a regression check
// takes the median of, among the same 10,000 results.
func BenchmarkRecentAtLoadMedian(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	loads := []Load{{16, 1, 256, 256}, {100, 8, 512, 256}, {200, 16, 1024, 256}, {16, 4, 256, 128}}
	for i := 0; i < 10000; i++ {
		l := loads[i%len(loads)]
		if _, err := s.AddBenchResult(ctx, BenchResult{Service: "qwen", Settings: fmt.Sprintf("steps=%d", i%5+1), OutputTokS: float64(i),
			Prompts: l.Prompts, Concurrency: l.Concurrency, InputLen: l.InputLen, OutputLen: l.OutputLen}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rs, err := s.RecentAtLoad(ctx, "qwen", "steps=3", loads[1], 0, 7)
		if err != nil || len(rs) != 7 {
			b.Fatalf("%d results, %v", len(rs), err)
		}
		if _, ok := MedianOutputTokS(rs); !ok {
			b.Fatal("no median")
		}
	}
}
