package commands

import (
	"context"
	"slices"

	"github.com/opsbot/opsbot/ops"
)

var sweepSpec = &Spec{
	Path:    "sweep",
	Summary: "run mtp steps for each value in a list, benchmark each at each concurrency, report the best with a chart",
	Details: "LIST is values separated by commas and ranges: 1,2,3 or 1..5 or 1..5,10 (at most 32 values, " +
		"each a valid steps value, no value twice). SGLang's topk and draft token lists are crossed with the steps: " +
		"with topk 1 SGLang makes draft tokens steps+1, so draft LIST needs a topk above 1, and a draft count the " +
		"draft tree of a steps value cannot hold is skipped there. Each setting is one restart through the mtp steps pipeline " +
		"(stop, clear the GPUs, write, start, verify); it is then benchmarked at each concurrency of `at LIST` " +
		"(default: the configured concurrency) without another restart. A value that fails is reported and the " +
		"sweep goes on. The report has a table per concurrency, each point beside its previous result, the best " +
		"point by the configured sweep.metric, and a chart. Afterwards the service is left on its configured " +
		"value (or where it was), or on the best point with --apply-best.",
	Examples: []string{"sweep steps 1..5,10", "sweep qwen steps 1,2,4,8 at 1,8,32 --apply-best", "sweep steps 2..4 topk 1,4 draft 8,16 --dry-run"},
	Policy:   Policy{Role: Operator, Mutating: true, Lock: LockService, Schedulable: true, Hosts: true, Reaps: true, Slash: true},
	new:      func() Command { return new(Sweep) },
}

// Sweep is `sweep [SERVICE] steps LIST ...`: mtp steps for each value, benchmarked, with a report and a chart.
type Sweep struct {
	On
	Steps     []int `json:"steps"`                // LIST, in the order given, no duplicates
	TopK      []int `json:"topk,omitempty"`       // SGLang topk values; nil = the unit's
	Draft     []int `json:"draft,omitempty"`      // draft token counts for each topk above 1; nil = the unit's
	At        []int `json:"at,omitempty"`         // concurrencies, in the order given; nil = the configured one
	ApplyBest bool  `json:"apply_best,omitempty"` // leave the service on the best point
	DryRun    bool  `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*Sweep) Spec() *Spec { return sweepSpec }

func (c *Sweep) args() []arg {
	return []arg{service(&c.On), literal("steps"), stepList(&c.Steps), topKList(&c.TopK), draftList(&c.Draft), atListArg{v: &c.At}, flagOf(&flagApplyBest, &c.ApplyBest), dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *Sweep) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.Sweep(ctx, c.Service, ops.SweepOptions{Steps: c.Steps, TopK: c.TopK, Draft: c.Draft, At: c.At, ApplyBest: c.ApplyBest, DryRun: c.DryRun}, rep)
}

// check: a draft LIST needs a topk above 1.
func (c *Sweep) check() (string, string) {
	if len(c.Draft) > 0 && !slices.ContainsFunc(c.TopK, func(k int) bool { return k > 1 }) {
		return "draft tokens follow steps when topk is 1 (SGLang makes them steps+1): a draft LIST needs a topk LIST with a value above 1",
			"for example `" + sweepSpec.Examples[2] + "`"
	}
	return "", ""
}

// restarts: one per point of the grid.
func (c *Sweep) restarts() int { return len(c.Steps) * max(1, len(c.TopK)) * max(1, len(c.Draft)) }
