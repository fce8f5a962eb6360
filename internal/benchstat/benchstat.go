// Package benchstat is the latency arithmetic of opsbot's benchmarks:
// bursts of calls released at once, and the percentiles they report.
package benchstat

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Burst calls do(0) ... do(n-1) at once (each in its goroutine, released
// together), b.N times, and returns how long every call took.
func Burst(b *testing.B, n int, do func(i int)) []time.Duration {
	var all []time.Duration
	for range b.N {
		lat := make([]time.Duration, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				do(i)
				lat[i] = time.Since(t0)
			}()
		}
		close(start)
		wg.Wait()
		all = append(all, lat...)
	}
	return all
}

// Quantile is the q-quantile (0..1) of d, by the nearest rank below; d
// must be sorted.
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[int(q*float64(len(d)-1))]
}

// Report sorts d and reports its p50, p99 and max in milliseconds
// (p50-ms, p99-ms, max-ms).
func Report(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
	b.ReportMetric(ms(Quantile(d, 0.50)), "p50-ms")
	b.ReportMetric(ms(Quantile(d, 0.99)), "p99-ms")
	b.ReportMetric(ms(Quantile(d, 1)), "max-ms")
}
