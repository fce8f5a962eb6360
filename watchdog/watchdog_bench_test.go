package watchdog

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/lab"
)

// BenchmarkWatchdogPass measures one watchdog pass over 1, 10 and 100
// services of a lab fleet (N services on N/4 simulated Proxmox nodes, each
// container its own SSH host on loopback): wall time and this process's CPU
// per pass (the bot's side and the simulated hosts' together: they share the
// process). Every service is healthy, so a pass is N `svc status` (systemctl
// show over one pooled SSH connection per host, plus a /health probe).
func BenchmarkWatchdogPass(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			ctx := context.Background()
			f, err := lab.StartFleet(ctx, n, lab.Options{TimeScale: 25})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { f.Close() })
			wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
			defer cancel()
			if err := f.WaitReady(wctx); err != nil {
				b.Fatal(err)
			}
			path, err := f.WriteConfig(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			app, _ := apptest.Topology(b, f.Topology(), path, "")
			w, err := NewWatchdog(app, WatchdogOptions{})
			if err != nil {
				b.Fatal(err)
			}
			// The first pass dials every host; later ones reuse the connections.
			if rep, err := w.Pass(ctx, time.Now()); err != nil || rep.Checked != n || len(rep.Opened) != 0 {
				b.Fatalf("first pass: %+v %v", rep, err)
			}
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				if rep, err := w.Pass(ctx, time.Now()); err != nil || rep.Checked != n || len(rep.Opened) != 0 {
					b.Fatalf("pass: %+v %v", rep, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/pass")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
