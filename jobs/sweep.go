package jobs

import (
	"context"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// sweepReport puts a sweep's (or a tune's, or an applied per-load form's)
// report into res: a table per concurrency (output tok/s, per-stream tok/s,
// accept length, acceptance rate, TTFT p50/p99; "—" where not measured,
// with one line per cause), the best point of each by res.Metric marked,
// each point beside an earlier run's result at the same load (rows[i] is
// point i's result as stored, or kept to be stored with ID 0; zero when it
// is neither): for a fixed
// setting the last at the same settings, for a per-load form the last of
// any form (what ran before it); never one of this job's. And the chart,
// titled with the service, the job and its start. Storing or rendering
// problems are logged; the job's result stands.
func (e *Engine) sweepReport(ctx context.Context, r *jobRun, res *ops.Result, rows []store.BenchResult) {
	prev := make([]*store.BenchResult, len(res.Points))
	for i, row := range rows {
		if row.Service == "" {
			continue
		}
		settings := row.Settings
		if res.Points[i].PerLoad != nil {
			settings = ""
		}
		if p, err := e.opts.Store.PreviousAtLoad(ctx, r.job.Service, settings, row.Load(), row.ID, r.job.ID); err == nil {
			prev[i] = &p
		}
	}
	var current ops.Setting
	if res.Spec != nil && res.Spec.Adaptive == "" && res.Spec.BatchTable == "" {
		current = ops.Setting{Steps: res.Spec.Steps, TopK: res.Spec.TopK, DraftTokens: res.Spec.DraftTokens}
	}
	res.Details = append(res.Details, report.SweepTables(res.Points, prev, res.Metric, current)...)
	at := r.job.StartedAt
	if at.IsZero() {
		at = time.Now()
	}
	png, err := report.SweepChart(res.Points, prev, res.Metric, current, report.ChartInfo{Service: r.job.Service, JobID: r.job.ID, At: at})
	if err != nil {
		e.log.Warn("render sweep chart", "job", r.job.ID, "err", err)
		return
	}
	res.Chart = png
}
