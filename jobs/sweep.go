package jobs

import (
	"context"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// sweepReport puts a sweep's (or a tune's) report into res: a table per
// concurrency (output tok/s, per-stream tok/s, accept length, acceptance
// rate, TTFT p50/p99), the best point of each by res.Metric marked, each
// point beside its previous result at the same settings and load (rows[i] is
// point i's result as stored, or kept to be stored with ID 0; zero when it
// is neither), and the chart.
// Storing or rendering problems are logged; the job's result stands.
func (e *Engine) sweepReport(ctx context.Context, r *jobRun, res *ops.Result, rows []store.BenchResult) {
	prev := make([]*store.BenchResult, len(res.Points))
	for i, row := range rows {
		if row.Service == "" {
			continue
		}
		if p, err := e.opts.Store.PreviousAtLoad(ctx, r.job.Service, row.Settings, row.Load(), row.ID); err == nil {
			prev[i] = &p
		}
	}
	var current ops.Setting
	if res.Spec != nil {
		current = ops.Setting{Steps: res.Spec.Steps, TopK: res.Spec.TopK, DraftTokens: res.Spec.DraftTokens}
	}
	res.Details = append(res.Details, report.SweepTables(res.Points, prev, res.Metric, current)...)
	png, err := report.SweepChart(res.Points, res.Metric, current)
	if err != nil {
		e.log.Warn("render sweep chart", "job", r.job.ID, "err", err)
		return
	}
	res.Chart = png
}
