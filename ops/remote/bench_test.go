package remote_test

import (
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
)

// The figures of issue 4: a command on the shared connection against one on a new connection
// each time (TCP connect, SSH handshake and auth included). Compare the two ms/op.

func benchRun(b *testing.B, tg target, fresh bool) {
	p := tg.pool(b, nil)
	h := mustHost(b, p, tg.host)
	if _, err := h.Run(testkit.Context(b, 30*time.Second), nil, "true"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if fresh {
			p.Drop(tg.host)
		}
		out, err := h.Run(testkit.Context(b, 30*time.Second), nil, "true")
		if err != nil || out.ExitStatus != 0 {
			b.Fatalf("true: %+v %v", out, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
	b.ReportMetric(float64(p.Dials())/float64(b.N+1), "dials/op")
}

func BenchmarkRunReused(b *testing.B) {
	b.Run("sshd", func(b *testing.B) { benchRun(b, sshdTarget(b, sshdtest.Start(b)), false) })
	b.Run("lab", func(b *testing.B) { benchRun(b, labTarget(b, startLab(b)), false) })
}

func BenchmarkRunNewConnection(b *testing.B) {
	b.Run("sshd", func(b *testing.B) { benchRun(b, sshdTarget(b, sshdtest.Start(b)), true) })
	b.Run("lab", func(b *testing.B) { benchRun(b, labTarget(b, startLab(b)), true) })
}
