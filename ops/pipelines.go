package ops

import (
	"context"

	"github.com/opsbot/opsbot/commands"
)

// Pipeline runs one job command's pipeline on a Runbook.
type Pipeline func(ctx context.Context, r *Runbook, cmd *commands.Command, rep Reporter) (*Result, error)

// pipelines binds every job command of the registry to its pipeline, by its
// Spec: adding a job command is one entry here and one Runbook method.
var pipelines = map[*commands.Spec]Pipeline{
	spec("mtp steps"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.MTPSteps(ctx, c.Service, c.Steps, c.DryRun, rep)
	},
	spec("mtp show"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.MTPShow(ctx, c.Service, rep)
	},
	spec("mtp undo"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.MTPUndo(ctx, c.Service, c.DryRun, rep)
	},
	spec("gpu status"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.GPUStatus(ctx, c.Host, rep)
	},
	spec("gpu recover"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.GPURecover(ctx, c.Service, RecoverOptions{NoStart: c.NoStart, Force: c.Force, DryRun: c.DryRun}, rep)
	},
	spec("svc start"):   serviceAction("start"),
	spec("svc stop"):    serviceAction("stop"),
	spec("svc restart"): serviceAction("restart"),
	spec("svc status"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.ServiceStatus(ctx, c.Service, rep)
	},
	spec("svc logs"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.ServiceLogs(ctx, c.Service, c.Lines, rep)
	},
	spec("bench"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.Bench(ctx, c.Service, c.Bench, c.DryRun, rep)
	},
	spec("sweep"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.Sweep(ctx, c.Service, SweepOptions{Steps: c.SweepSteps, TopK: c.SweepTopK, Draft: c.SweepDraft, At: c.SweepAt, ApplyBest: c.ApplyBest, DryRun: c.DryRun}, rep)
	},
	spec("mtp per-load"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		rows := make([]PerLoadRow, len(c.LoadTable))
		for i, e := range c.LoadTable {
			rows[i] = PerLoadRow{Concurrency: e.Concurrency, Steps: e.Steps[0], Candidates: e.Steps}
		}
		return r.ApplyPerLoad(ctx, c.Service, rows, c.DryRun, rep)
	},
	spec("mtp tune"): func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		if c.PerLoad {
			return r.TunePerLoad(ctx, c.Service, PerLoadOptions{At: c.SweepAt, From: c.TuneFrom, To: c.TuneTo, DryRun: c.DryRun}, rep)
		}
		return r.Tune(ctx, c.Service, TuneOptions{From: c.TuneFrom, To: c.TuneTo, Concurrency: c.Bench.Concurrency, DryRun: c.DryRun}, rep)
	},
}

func serviceAction(verb string) Pipeline {
	return func(ctx context.Context, r *Runbook, c *commands.Command, rep Reporter) (*Result, error) {
		return r.ServiceAction(ctx, c.Service, verb, c.DryRun, rep)
	}
}

// spec returns the registry's Spec at path; a path the registry lacks is a
// programming error caught when the package loads.
func spec(path string) *commands.Spec {
	s := commands.Lookup(path)
	if s == nil {
		panic("ops: no command " + path + " in the registry")
	}
	return s
}

// PipelineFor returns the pipeline bound to s, or nil when s is not a job
// command run on hosts (help, jobs, schedules, ...).
func PipelineFor(s *commands.Spec) Pipeline { return pipelines[s] }
