package store

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkCreateJob is one goroutine creating jobs back to back.
func BenchmarkCreateJob(b *testing.B) {
	ctx := context.Background()
	s := openTemp(b)
	for b.Loop() {
		if _, err := s.CreateJob(ctx, Job{Command: "mtp steps 10 qwen", Platform: "slack", User: "U1", Room: "C1"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateJobAppendEvent is one job row plus one event row per op, serially.
func BenchmarkCreateJobAppendEvent(b *testing.B) {
	ctx := context.Background()
	s := openTemp(b)
	for b.Loop() {
		j, err := s.CreateJob(ctx, Job{Command: "mtp steps 10 qwen", Platform: "slack", User: "U1", Room: "C1"})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.AppendEvent(ctx, Event{JobID: j.ID, Step: "queued", Status: "done", Message: "waiting for gpu1"}); err != nil {
			b.Fatal(err)
		}
	}
}

// latencies collects per-call durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	slices.Sort(l.d)
	if len(l.d) == 0 {
		return
	}
	q := func(p float64) float64 {
		return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(l.d[len(l.d)-1])/float64(time.Millisecond), "max-ms")
}

// parallelism sets b.RunParallel to about n goroutines.
func parallelism(b *testing.B, n int) {
	b.SetParallelism(max(1, (n+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
}

// BenchmarkCreateJobParallel100 is the ack path's write under load: about
// 100 goroutines creating jobs at once. Reports per-call latency quantiles.
func BenchmarkCreateJobParallel100(b *testing.B) {
	ctx := context.Background()
	s := openTemp(b)
	var lat latencies
	parallelism(b, 100)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if _, err := s.CreateJob(ctx, Job{Command: "mtp steps 10 qwen", Platform: "slack", User: "U1", Room: "C1"}); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		lat.add(mine)
	})
	lat.report(b)
}

// BenchmarkCreateJobAppendEventParallel100 is CreateJob+AppendEvent from
// about 100 goroutines; latency is for the pair.
func BenchmarkCreateJobAppendEventParallel100(b *testing.B) {
	ctx := context.Background()
	s := openTemp(b)
	var lat latencies
	parallelism(b, 100)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			j, err := s.CreateJob(ctx, Job{Command: "mtp steps 10 qwen", Platform: "slack", User: "U1", Room: "C1"})
			if err == nil {
				err = s.AppendEvent(ctx, Event{JobID: j.ID, Step: "queued", Status: "done"})
			}
			if err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		lat.add(mine)
	})
	lat.report(b)
}

// BenchmarkAckBurst is issue 3's scenario for the store's share: 1,000
// requests arrive at once from 100 users and each writes what the ack path
// writes (a queued job and the audit entry accepting it). One op is one
// burst; the latency of a request runs from the burst's release until its
// rows are committed. "audited" uses CreateJobAudited (one call), "two-calls"
// CreateJob then AppendAudit.
func BenchmarkAckBurst(b *testing.B) {
	const users, perUser = 100, 10
	for _, mode := range []string{"audited", "two-calls"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s := openTemp(b)
			var lat latencies
			for b.Loop() {
				start := make(chan struct{})
				var wg sync.WaitGroup
				var t0 time.Time
				var mu sync.Mutex
				var burst []time.Duration
				for u := range users * perUser {
					wg.Go(func() {
						user := fmt.Sprintf("U%03d", u%users)
						j := Job{Command: "mtp steps 10 qwen", Platform: "slack", User: user, Room: "C1"}
						e := AuditEntry{Platform: "slack", User: user, Room: "C1", Command: j.Command, Decision: DecisionAccepted}
						<-start
						var err error
						if mode == "audited" {
							_, err = s.CreateJobAudited(ctx, j, e)
						} else {
							j, err = s.CreateJob(ctx, j)
							if err == nil {
								e.JobID = j.ID
								err = s.AppendAudit(ctx, e)
							}
						}
						d := time.Since(t0)
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						burst = append(burst, d)
						mu.Unlock()
					})
				}
				t0 = time.Now()
				close(start)
				wg.Wait()
				lat.add(burst)
			}
			lat.report(b)
		})
	}
}
