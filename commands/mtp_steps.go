package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var mtpStepsSpec = &Spec{
	Path:    "mtp steps",
	Summary: "set the speculative (MTP) decoding steps of a service, redeploy it and benchmark it",
	Details: "Edits the unit's engine arguments (SGLang: steps, topk and draft tokens together; vLLM: " +
		"num_speculative_tokens), stops the service, clears GPU memory left by dead processes, starts it, " +
		"waits until it serves, verifies the engine reports the new value and benchmarks it. " +
		"A restart loop is recovered once; if it persists the previous unit is restored. " +
		"N 0 takes speculative decoding off (as `mtp off`): every speculative option leaves the command line, no other " +
		"byte changes, and `mtp undo` puts them back; a value above 0 on a unit without speculation is refused (undo first).",
	Examples: []string{"mtp steps 10", "mtp steps 4 qwen --dry-run", "mtp steps 0"},
	Policy:   Policy{Role: Operator, Mutating: true, Lock: LockService, Schedulable: true, Hosts: true, Reaps: true, Slash: true, OnGroup: GroupRollout},
	new:      func() Command { return new(MTPSteps) },
}

// MTPSteps is `mtp steps N [SERVICE]`: set the speculative decoding steps and redeploy.
type MTPSteps struct {
	On
	Steps  int  `json:"steps"`
	DryRun bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*MTPSteps) Spec() *Spec { return mtpStepsSpec }

func (c *MTPSteps) args() []arg { return []arg{steps(&c.Steps), service(&c.On), dryRun(&c.DryRun)} }

// Run runs the command's pipeline on rb.
func (c *MTPSteps) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	if IsRollout(c) {
		return rb.Rollout(ctx, c.Service, c.rolloutChange(), c.DryRun, rep)
	}
	return rb.MTPSteps(ctx, c.Service, c.Steps, c.DryRun, rep)
}
