package bot

import (
	"context"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// RegressionPolicy says when a result is a regression: its output tok/s is
// more than Pct percent below the median of the last Runs comparable runs
// (config alerts.regression_pct and alerts.regression_runs).
type RegressionPolicy struct {
	Pct  int // <= 0: 10
	Runs int // <= 0: 7
}

// minRegressionRuns is the fewest comparable runs a median is taken of: with
// fewer, one noisy run would decide.
const minRegressionRuns = 3

// Regression is one benchmark of a job that fell below its comparable runs.
type Regression struct {
	Settings string     // the settings key ("steps=10,topk=1,draft=11")
	Load     store.Load // the load it ran under
	Current  float64    // its output tok/s
	Median   float64    // the median output tok/s of the comparable runs
	Runs     int        // how many comparable runs the median is of
	DropPct  float64    // how far Current is below Median, in percent
}

// Alert is a regression alert for one job: what fell, by how much, and the
// job to look at. Text is the message to post, as it reads in any chat.
type Alert struct {
	Service     string
	JobID       int64
	Regressions []Regression
	Text        string
}

// CheckRegression judges a finished job's benchmarks (res.Bench, and every
// benchmarked point of a sweep) against the median of the last pol.Runs
// comparable runs in st: the same service, settings and load, the job's own
// results left out. It returns an alert naming each benchmark whose output
// tok/s is more than pol.Pct percent below that median, with both figures
// and the job, or nil when none is (or when fewer than 3 comparable runs, or
// pol.Runs when it is smaller, exist). Call it after the job finished (its
// results are stored by then); it reads the store and changes nothing, and
// is safe for concurrent use. An error means the store could not be read.
func CheckRegression(ctx context.Context, st *store.Store, job store.Job, res *ops.Result, pol RegressionPolicy) (*Alert, error) {
	if res == nil {
		return nil, nil
	}
	if pol.Pct <= 0 {
		pol.Pct = 10
	}
	if pol.Runs <= 0 {
		pol.Runs = 7
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
		key, load := SettingsKey(b.spec), loadOf(b.f)
		prev, err := st.RecentAtLoad(ctx, job.Service, key, load, job.ID, pol.Runs)
		if err != nil {
			return nil, fmt.Errorf("check job #%d of %s for a regression: %w", job.ID, job.Service, err)
		}
		med, ok := store.MedianOutputTokS(prev)
		if !ok || len(prev) < min(minRegressionRuns, pol.Runs) || med <= 0 {
			continue
		}
		cur := b.f.OutputTokS
		if cur >= med*(1-float64(pol.Pct)/100) {
			continue
		}
		al.Regressions = append(al.Regressions, Regression{Settings: key, Load: load, Current: cur, Median: med,
			Runs: len(prev), DropPct: (med - cur) / med * 100})
	}
	if len(al.Regressions) == 0 {
		return nil, nil
	}
	al.Text = regressionText(al, pol)
	return al, nil
}

func regressionText(a *Alert, pol RegressionPolicy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "regression: %s got slower in job #%d (more than %d%% below the median of its last comparable runs)\n", a.Service, a.JobID, pol.Pct)
	for _, r := range a.Regressions {
		fmt.Fprintf(&b, "• %s at %s: %.1f tok/s, %.1f%% below the median %.1f tok/s of the last %d runs\n",
			r.Settings, r.Load, r.Current, r.DropPct, r.Median, r.Runs)
	}
	fmt.Fprintf(&b, "now: %s serves as the job left it (nothing was changed because of this alert)\n", a.Service)
	fmt.Fprintf(&b, "next: `job %d` shows the run; `history %s` the results it is compared with", a.JobID, a.Service)
	return b.String()
}
