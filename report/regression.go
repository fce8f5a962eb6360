package report

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// RegressionPolicy says when a result is a regression: its output tok/s or
// its accept length is more than Pct percent below the median of the last
// Runs comparable runs (config alerts.regression_pct and
// alerts.regression_runs).
type RegressionPolicy struct {
	Pct  int // <= 0: config.DefaultRegressionPct
	Runs int // <= 0: config.DefaultRegressionRuns
}

// minRegressionRuns is the fewest comparable runs a median is taken of: with
// fewer, one noisy run would decide.
const minRegressionRuns = 3

// regressionFigures are the figures CheckRegression judges, by their sweep
// metric names (ops.Metric*), with how each reads from a result and from the
// history. A figure that was not measured (NaN, or an accept length of 0:
// no speculation) is not judged.
var regressionFigures = []struct {
	metric string
	cur    func(*ops.BenchResult) float64
	stored func(store.BenchResult) float64
}{
	{ops.MetricOutputTokS, func(b *ops.BenchResult) float64 { return b.OutputTokS }, func(r store.BenchResult) float64 { return r.OutputTokS }},
	{ops.MetricAcceptLen, func(b *ops.BenchResult) float64 { return measured(b.AcceptLen) }, func(r store.BenchResult) float64 { return measured(r.AcceptLen) }},
}

// measured is f, or NaN when f is not a positive figure.
func measured(f float64) float64 {
	if !(f > 0) {
		return math.NaN()
	}
	return f
}

// Regression is one figure of one benchmark of a job (one setting in one
// concurrency bucket) that fell below its comparable runs.
type Regression struct {
	Settings string     // the settings key ("steps=10,topk=1,draft=11")
	Load     store.Load // the load it ran under; Load.Concurrency is its bucket
	// Metric is the figure that fell: ops.MetricOutputTokS or
	// ops.MetricAcceptLen.
	Metric  string
	Current float64 // the job's figure
	Median  float64 // the median of the comparable runs' figure
	Runs    int     // how many comparable runs the median is of
	DropPct float64 // how far Current is below Median, in percent
}

// Alert is a regression alert for one job: what fell, by how much, and the
// job to look at. Text is the message to post, as it reads in any chat.
type Alert struct {
	Service string
	JobID   int64
	// Regressions are ordered by concurrency bucket, then as the job ran
	// its settings, output tok/s before accept length.
	Regressions []Regression
	Text        string
}

// CheckRegression judges a finished job's benchmarks (res.Bench, and every
// benchmarked point of a sweep: each setting in each concurrency bucket)
// against the median of the last pol.Runs comparable runs in st: the same
// service, settings and load (concurrency included), the job's own results
// left out. It returns an alert naming each bucket and setting whose output
// tok/s or accept length is more than pol.Pct percent below that median,
// with both figures and the job, or nil when none is (a figure is judged
// only when the job measured it and at least 3 comparable runs, or pol.Runs
// when it is smaller, did). Call it after the job finished (its results are
// stored by then); it reads the store and changes nothing, and is safe for
// concurrent use. An error means the store could not be read.
func CheckRegression(ctx context.Context, st *store.Store, job store.Job, res *ops.Result, pol RegressionPolicy) (*Alert, error) {
	if res == nil {
		return nil, nil
	}
	if pol.Pct <= 0 {
		pol.Pct = config.DefaultRegressionPct
	}
	if pol.Runs <= 0 {
		pol.Runs = config.DefaultRegressionRuns
	}
	type bench struct {
		f    *ops.BenchResult
		spec *ops.Spec
	}
	var all []bench
	if res.Bench != nil && res.Spec != nil {
		all = append(all, bench{res.Bench, res.Spec})
	}
	for _, p := range res.Points {
		if p.OK && p.Bench != nil && p.Spec != nil {
			all = append(all, bench{p.Bench, p.Spec})
		}
	}
	al := &Alert{Service: job.Service, JobID: job.ID}
	for _, b := range all {
		key, load := SettingsKey(b.spec), LoadOf(b.f)
		prev, err := st.RecentAtLoad(ctx, job.Service, key, load, job.ID, pol.Runs)
		if err != nil {
			return nil, fmt.Errorf("check job #%d of %s for a regression: %w", job.ID, job.Service, err)
		}
		for _, fig := range regressionFigures {
			cur := fig.cur(b.f)
			if math.IsNaN(cur) {
				continue
			}
			var n int
			for _, r := range prev {
				if !math.IsNaN(fig.stored(r)) {
					n++
				}
			}
			med, ok := store.Median(prev, fig.stored)
			if !ok || n < min(minRegressionRuns, pol.Runs) || med <= 0 {
				continue
			}
			if cur >= med*(1-float64(pol.Pct)/100) {
				continue
			}
			al.Regressions = append(al.Regressions, Regression{Settings: key, Load: load, Metric: fig.metric,
				Current: cur, Median: med, Runs: n, DropPct: (med - cur) / med * 100})
		}
	}
	if len(al.Regressions) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(al.Regressions, func(a, b Regression) int { return a.Load.Concurrency - b.Load.Concurrency })
	al.Text = regressionText(al, pol)
	return al, nil
}

func regressionText(a *Alert, pol RegressionPolicy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "regression: %s measured more than %d%% below the median of its last comparable runs in job #%d\n", a.Service, pol.Pct, a.JobID)
	accept := false
	for _, r := range a.Regressions {
		figure := func(v float64) string { return fmt.Sprintf("%.1f tok/s", v) }
		what := "output"
		if r.Metric == ops.MetricAcceptLen {
			figure = func(v float64) string { return fmt.Sprintf("%.2f", v) }
			what, accept = "accept length", true
		}
		fmt.Fprintf(&b, "• concurrency %d, %s: %s %s, %.1f%% below the median %s of the last %d runs (prompts=%d in=%d out=%d)\n",
			r.Load.Concurrency, r.Settings, what, figure(r.Current), r.DropPct, figure(r.Median), r.Runs,
			r.Load.Prompts, r.Load.InputLen, r.Load.OutputLen)
	}
	fmt.Fprintf(&b, "now: %s serves as the job left it (nothing was changed because of this alert)\n", a.Service)
	fmt.Fprintf(&b, "next: `job %d` shows the run; `history %s` the results it is compared with", a.JobID, a.Service)
	if accept {
		fmt.Fprintf(&b, "; an accept length that fell at unchanged settings points at the draft model or the prompts: `mtp show %s` shows what the engine runs", a.Service)
	}
	return b.String()
}
