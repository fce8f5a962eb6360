package ops_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
)

// BenchmarkMTPStepsOverhead measures what `mtp steps N` costs beyond the
// engine's own work: the job's wall time minus the time from the start command
// until the engine serves (model load, warm-up) and minus the benchmark. What
// is left is the bot's reading, stopping, GPU checks, writing and verifying.
// The lab runs at its default time scale, so engine stop and load take
// realistic fractions of a second.
func BenchmarkMTPStepsOverhead(b *testing.B) {
	r := newRig(b, labOptsScale(25), func(c *ops.Config) { c.SettleTime = 100 * time.Millisecond })
	var overhead, total, engine, benchT time.Duration
	for i := 0; i < b.N; i++ {
		ev := &events{}
		t0 := time.Now()
		if _, err := r.rb.MTPSteps(testkit.Context(b, 60*time.Second), "qwen", 4+i%2, false, ev); err != nil {
			b.Fatalf("mtp steps: %v\n%s", err, ev.text())
		}
		d := time.Since(t0)
		var startAt, readyAt, benchAt, benchEnd time.Time
		for _, e := range ev.ev {
			switch {
			case e.Step == "start" && e.Status == ops.StepStarted:
				startAt = e.At
			case e.Step == "wait until ready" && e.Status == ops.StepDone:
				readyAt = e.At
			case e.Step == "benchmark" && e.Status == ops.StepStarted:
				benchAt = e.At
			case e.Step == "benchmark" && e.Status == ops.StepDone:
				benchEnd = e.At
			}
		}
		if startAt.IsZero() || readyAt.IsZero() || benchEnd.IsZero() {
			b.Fatalf("missing steps:\n%s", ev.text())
		}
		total += d
		engine += readyAt.Sub(startAt)
		benchT += benchEnd.Sub(benchAt)
		overhead += d - readyAt.Sub(startAt) - benchEnd.Sub(benchAt)
		for _, e := range ev.ev {
			if e.Status == ops.StepFailed {
				b.Fatalf("a step failed:\n%s", ev.text())
			}
		}
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((overhead / n).Milliseconds()), "overhead-ms/op")
	b.ReportMetric(float64((engine / n).Milliseconds()), "engine-start-ms/op")
	b.ReportMetric(float64((benchT / n).Milliseconds()), "bench-ms/op")
	b.ReportMetric(float64((total / n).Milliseconds()), "total-ms/op")
}

// BenchmarkSweepOverhead measures what a 6-value `sweep steps 1..6` costs
// beyond the engine's own work, per value: the sweep's wall time minus every
// start-until-serving window (the restore's included) and every benchmark,
// divided by the 6 values. The lab runs at its default time scale.
func BenchmarkSweepOverhead(b *testing.B) {
	r := newRig(b, labOptsScale(25), func(c *ops.Config) { c.SettleTime = 100 * time.Millisecond })
	var overhead, total, engine, benchT time.Duration
	for i := 0; i < b.N; i++ {
		ev := &events{}
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		res, err := r.rb.Sweep(ctx, "qwen", ops.SweepOptions{Steps: []int{1, 2, 3, 4, 5, 6}}, ev)
		cancel()
		if err != nil {
			b.Fatalf("sweep: %v\n%s", err, ev.text())
		}
		d := time.Since(t0)
		var eng, bt time.Duration
		open := map[string]time.Time{}
		for _, e := range ev.ev {
			prefix, step, _ := strings.Cut(e.Step, ": ")
			switch {
			case step == "start" && e.Status == ops.StepStarted, step == "benchmark" && e.Status == ops.StepStarted:
				open[prefix+step] = e.At
			case step == "wait until ready" && e.Status == ops.StepDone:
				eng += e.At.Sub(open[prefix+"start"])
			case step == "benchmark" && e.Status == ops.StepDone:
				bt += e.At.Sub(open[prefix+"benchmark"])
			case e.Status == ops.StepFailed:
				b.Fatalf("a step failed:\n%s", ev.text())
			}
		}
		if len(res.Points) != 6 || eng == 0 || bt == 0 {
			b.Fatalf("points %d, engine %s, bench %s:\n%s", len(res.Points), eng, bt, ev.text())
		}
		total += d
		engine += eng
		benchT += bt
		overhead += d - eng - bt
	}
	per := time.Duration(b.N) * 6
	b.ReportMetric(float64((overhead / per).Milliseconds()), "overhead-ms/value")
	b.ReportMetric(float64((engine / per).Milliseconds()), "engine-start-ms/value")
	b.ReportMetric(float64((benchT / per).Milliseconds()), "bench-ms/value")
	b.ReportMetric(float64((total / time.Duration(b.N)).Milliseconds()), "total-ms/sweep")
}
