package ops_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
)

// BenchmarkTunePerLoad gives the figures of issue 34 for `mtp tune qwen
// per-load 1..12 at 1,8,32,64` on the lab's default service and benchmark
// shape (labBench): its restarts
// and wall time (the proposal's own start and the way back included)
// against the full sweep of the same values (steps 0..12 at 1,8,32,64 and
// the loads between, with the tune's measuring window, and back); how often the proposal starts when applied (`mtp per-load`,
// 10 times, each followed by `mtp undo`'s way back); and, at concurrency 1,
// 2, 4, 8, 16, 32, 48 and 64, the applied proposal's tok/s against the best
// single setting, SGLang's default adaptive table and no speculation, each
// deployed through the pipeline on the lab and benchmarked the same way.
func BenchmarkTunePerLoad(b *testing.B) {
	r := newRig(b, labOpts(), func(c *ops.Config) { c.Bench = labBench })
	at := []int{1, 8, 32, 64}
	ctx := testkit.Context(b, 60*time.Minute)
	var res *ops.Result
	var tuneWall time.Duration
	for range b.N {
		ev := &events{}
		t0 := time.Now()
		var err error
		res, err = r.rb.TunePerLoad(ctx, "qwen", ops.PerLoadOptions{At: at, From: 1, To: 12}, ev)
		if err != nil {
			b.Fatalf("tune per load: %v\n%s", err, ev.text())
		}
		tuneWall += time.Since(t0)
	}
	b.StopTimer()
	pl := res.PerLoad
	t0 := time.Now()
	grid, err := r.rb.PerLoadGrid(ctx, "qwen", append(slices.Clone(at), pl.Between...), 0, 12, 3)
	if err != nil {
		b.Fatalf("full sweep: %v", err)
	}
	gridWall := time.Since(t0)
	b.ReportMetric(float64(res.Restarts), "restarts")
	b.ReportMetric(float64(len(res.Tried)), "values")
	b.ReportMetric(tuneWall.Seconds()/float64(b.N), "tune-s")
	b.ReportMetric(float64(grid.Restarts), "grid-restarts")
	b.ReportMetric(gridWall.Seconds(), "grid-s")
	// Printed, not logged: a benchmark's log is cut short.
	fmt.Printf("%s\n%s\n", res.Summary, strings.Join(res.Details, "\n"))
	fmt.Printf("tune: %d restarts, %d values, %.1f s; full sweep 0..12 at 1,8,32,64 and the loads between, with the tune's window, and back: %d restarts, %.1f s\n",
		res.Restarts, len(res.Tried), tuneWall.Seconds()/float64(b.N), grid.Restarts, gridWall.Seconds())

	rows := pl.Rows[:0:0]
	for _, row := range pl.Rows {
		if row.Slot == 0 {
			rows = append(rows, ops.PerLoadRow{Concurrency: row.Concurrency, Steps: row.Steps, Candidates: row.Candidates})
		}
	}
	apply := ops.PerLoadApply{Rows: rows, SkipZeroDraftExtend: pl.SkipZeroDraftExtend}
	started := 0
	for range 10 {
		if _, err := r.rb.ApplyPerLoadWith(ctx, "qwen", apply, ops.Discard); err == nil {
			started++
		} else {
			fmt.Printf("apply: %v\n", err)
		}
		if _, err := r.rb.MTPSteps(ctx, "qwen", 3, false, ops.Discard); err != nil {
			b.Fatalf("back to steps 3: %v", err)
		}
	}
	b.ReportMetric(float64(started), "applied-started/10")

	fmt.Printf("%s\n", strings.Join(applied(b, r, pl, rows, ops.BenchParams{Prompts: labBench.Prompts, InputLen: labBench.InputLen, OutputLen: labBench.OutputLen}), "\n"))
}

// labBench is the lab's own config's benchmark shape (`opsbot lab` writes
// it: 16 prompts, 256 tokens in, 128 out): the goal's figures are taken on
// the lab's defaults.
var labBench = ops.BenchDefaults{Prompts: 16, Concurrency: 4, InputLen: 256, OutputLen: 128}

// BenchmarkTunePerLoadCompare gives the goal's figures of issue 34 for `mtp
// tune qwen per-load 1..12 at 1,2,4,8,16,32,48,64 compare` on the lab's
// default service and benchmark shape (labBench): the tune's proposal
// (compare's mix included), its restarts and wall time, and the applied
// proposal at each load against the best single setting, SGLang's default
// adaptive table and no speculation, each deployed through the pipeline and
// benchmarked as the tune benchmarks (max(bench.prompts, 4 x N) prompts at
// concurrency N, the config's lengths). Each run prints its table.
//
// With PERLOAD_GRID set it measures the full sweep instead, once, with the
// tune's measuring window: its restarts and wall time.
func BenchmarkTunePerLoadCompare(b *testing.B) {
	at := []int{1, 2, 4, 8, 16, 32, 48, 64}
	ctx := testkit.Context(b, 60*time.Minute)
	shape := func(c *ops.Config) { c.Bench = labBench }
	if os.Getenv("PERLOAD_GRID") != "" {
		r := newRig(b, labOpts(), shape)
		t0 := time.Now()
		grid, err := r.rb.PerLoadGrid(ctx, "qwen", at, 0, 12, 3)
		if err != nil {
			b.Fatalf("full sweep: %v", err)
		}
		fmt.Printf("full sweep 0..12 at %v with the tune's window, and back to steps 3: %d restarts, %.1f s\n", at, grid.Restarts, time.Since(t0).Seconds())
		return
	}
	for i := range b.N {
		r := newRig(b, labOpts(), shape) // each run on a lab of its own, from steps 3
		ev := &events{}
		t0 := time.Now()
		res, err := r.rb.TunePerLoad(ctx, "qwen", ops.PerLoadOptions{At: at, From: 1, To: 12, Compare: true}, ev)
		if err != nil {
			b.Fatalf("tune per load: %v\n%s", err, ev.text())
		}
		wall := time.Since(t0)
		fmt.Printf("run %d\n%s\n%s\n", i+1, res.Summary, strings.Join(res.Details, "\n"))
		fmt.Printf("tune: %d restarts, %d values, %.1f s\n", res.Restarts, len(res.Tried), wall.Seconds())
		pl := res.PerLoad
		var rows []ops.PerLoadRow
		for _, row := range pl.Rows {
			if row.Slot == 0 {
				rows = append(rows, ops.PerLoadRow{Concurrency: row.Concurrency, Steps: row.Steps, Candidates: row.Candidates})
			}
		}
		fmt.Printf("%s\n", strings.Join(applied(b, r, pl, rows, ops.BenchParams{Prompts: labBench.Prompts, InputLen: labBench.InputLen, OutputLen: labBench.OutputLen}), "\n"))
		b.ReportMetric(float64(res.Restarts), "restarts")
		b.ReportMetric(wall.Seconds(), "tune-s")
	}
}

// applied deploys pl's table (rows), its best single setting, SGLang's
// default adaptive table and no speculation in turn through the pipeline,
// benchmarks each at concurrency 1, 2, 4, 8, 16, 32, 48 and 64 in each of
// shapes (max(Prompts, 4 x N) prompts at concurrency N, as the tune's
// window, InputLen and OutputLen tokens),
// and returns a table per shape of the proposal against each, its verdict
// last.
// It leaves the service without speculation.
func applied(b *testing.B, r *rig, pl *ops.PerLoad, rows []ops.PerLoadRow, shapes ...ops.BenchParams) []string {
	ctx := testkit.Context(b, 15*time.Minute)
	apply := ops.PerLoadApply{Rows: rows, SkipZeroDraftExtend: pl.SkipZeroDraftExtend}
	loads := []int{1, 2, 4, 8, 16, 32, 48, 64}
	// bench deploys one configuration and benchmarks it in each shape:
	// out[shape][load].
	bench := func(name string, deploy func() error) [][]float64 {
		if err := deploy(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		out := make([][]float64, len(shapes))
		for k, per := range shapes {
			out[k] = make([]float64, len(loads))
			for i, c := range loads {
				res, err := r.rb.Bench(ctx, "qwen", ops.BenchParams{Prompts: max(per.Prompts, 4*c), Concurrency: c, InputLen: per.InputLen, OutputLen: per.OutputLen}, false, ops.Discard)
				if err != nil {
					b.Fatalf("%s at %d: %v", name, c, err)
				}
				out[k][i] = res.Bench.OutputTokS
			}
		}
		return out
	}
	props := bench("the proposal", func() error { _, err := r.rb.ApplyPerLoadWith(ctx, "qwen", apply, ops.Discard); return err })
	singles := bench(fmt.Sprintf("steps %d", pl.Single), func() error { _, err := r.rb.MTPSteps(ctx, "qwen", pl.Single, false, ops.Discard); return err })
	defs := bench("SGLang's default table", func() error { _, err := r.rb.DeployDefaultTable(ctx, "qwen", 3, ops.Discard); return err })
	offs := bench("no speculation", func() error { _, err := r.rb.MTPSteps(ctx, "qwen", 0, false, ops.Discard); return err })
	words := perLoadTable(rows)
	if pl.SkipZeroDraftExtend {
		words += " skip-zero-extend"
	}
	var out []string
	for k, per := range shapes {
		prop, single, def, off := props[k], singles[k], defs[k], offs[k]
		lines := []string{fmt.Sprintf("applied `mtp per-load qwen %s`, benchmarked with max(%d, 4 x N) prompts, %d tokens in, %d out", words, per.Prompts, per.InputLen, per.OutputLen),
			fmt.Sprintf("%-11s  %9s  %-24s  %-24s  %-24s", "concurrency", "proposal", fmt.Sprintf("best single (steps %d)", pl.Single), "SGLang default table", "no speculation")}
		var missed, below []string
		for i, c := range loads {
			g1, g2, g3 := 100*(prop[i]/single[i]-1), 100*(prop[i]/def[i]-1), 100*(prop[i]/off[i]-1)
			lines = append(lines, fmt.Sprintf("%-11d  %9.1f  %9.1f (%+6.1f%%)       %9.1f (%+6.1f%%)       %9.1f (%+6.1f%%)", c, prop[i],
				single[i], g1, def[i], g2, off[i], g3))
			if g := min(g1, g2, g3); g < -3 {
				missed = append(missed, fmt.Sprintf("%d (%+.1f%%)", c, g))
			}
			if g3 < 0 {
				below = append(below, fmt.Sprintf("%d (%+.1f%%)", c, g3))
			}
			b.ReportMetric(prop[i], fmt.Sprintf("perload-tok/s@%d", c))
		}
		verdict := "within 3% of each, or better, at every load"
		if len(missed) > 0 {
			verdict = "more than 3% below one of them at " + strings.Join(missed, ", ")
		}
		if len(below) > 0 {
			verdict += "; below no speculation at " + strings.Join(below, ", ")
		} else {
			verdict += "; never below no speculation"
		}
		out = append(append(out, lines...), verdict)
	}
	return out
}

func perLoadTable(rows []ops.PerLoadRow) string {
	parts := make([]string, len(rows))
	for i, r := range rows {
		w := make([]string, len(r.Candidates))
		for j, n := range r.Candidates {
			w[j] = fmt.Sprint(n)
		}
		parts[i] = fmt.Sprintf("%d:%s", r.Concurrency, strings.Join(w, "/"))
	}
	return strings.Join(parts, " ")
}
