package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var mtpOffSpec = &Spec{
	Path:    "mtp off",
	Summary: "turn a service's speculative decoding off (mtp steps 0), redeploy it and benchmark it",
	Details: "The same as `mtp steps 0`: takes every speculative option out of the unit's engine command line " +
		"(SGLang: the --speculative-* options, adaptive ones included; vLLM: --speculative-config), changing no other " +
		"byte, then stops the service, clears GPU memory left by dead processes, starts it, waits until it serves, " +
		"verifies the engine runs without speculation and benchmarks it. `mtp undo` puts the options back as they were.",
	Examples: []string{"mtp off", "mtp off qwen --dry-run"},
	Policy:   Policy{Role: Operator, Mutating: true, Lock: LockService, Hosts: true, Reaps: true, Slash: true, OnGroup: GroupRollout},
	new:      func() Command { return new(MTPOff) },
}

// MTPOff is `mtp off [SERVICE]`: speculative decoding off, as `mtp steps 0`.
type MTPOff struct {
	On
	DryRun bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*MTPOff) Spec() *Spec { return mtpOffSpec }

func (c *MTPOff) args() []arg { return []arg{service(&c.On), dryRun(&c.DryRun)} }

// Run runs the command's pipeline on rb: mtp steps 0.
func (c *MTPOff) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	if IsRollout(c) {
		return rb.Rollout(ctx, c.Service, c.rolloutChange(), c.DryRun, rep)
	}
	return rb.MTPSteps(ctx, c.Service, 0, c.DryRun, rep)
}
