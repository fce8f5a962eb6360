package lab

import (
	"context"
	"testing"
	"time"
)

// BenchmarkSSHExecRoundTrip measures one exec (session open, `true`, exit status) on an
// existing connection; the goal is under 2 ms.
func BenchmarkSSHExecRoundTrip(b *testing.B) {
	l := startLab(b, fastOpts())
	c := dialHost(b, l, "gpu1")
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, _, code, err := c.Run(ctx, nil, "true"); err != nil || code != 0 {
			b.Fatalf("true: %d %v", code, err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/1000, "ms/roundtrip")
}

// BenchmarkSSHSystemctlShow is the ops layer's most frequent probe.
func BenchmarkSSHSystemctlShow(b *testing.B) {
	l := startLab(b, fastOpts())
	c := dialHost(b, l, "gpu1")
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, _, code, err := c.Run(ctx, nil, "systemctl", "show", "-p", "ActiveState,SubState,NRestarts,MainPID", qwenUnit); err != nil || code != 0 {
			b.Fatalf("show: %d %v", code, err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/1000, "ms/roundtrip")
}
