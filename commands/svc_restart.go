package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var svcRestartSpec = &Spec{
	Path:     "svc restart",
	Summary:  "restart a service and wait until it serves",
	Examples: []string{"svc restart", "svc restart qwen"},
	Policy:   Policy{Role: Operator, Mutating: true, Lock: LockService, Schedulable: true, Hosts: true, Reaps: true, Slash: true},
	new:      func() Command { return new(SvcRestart) },
}

// SvcRestart is `svc restart [SERVICE]`: restart a service and wait until it serves.
type SvcRestart struct {
	On
	DryRun bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*SvcRestart) Spec() *Spec { return svcRestartSpec }

func (c *SvcRestart) args() []arg { return []arg{service(&c.On), dryRun(&c.DryRun)} }

// Run runs the command's pipeline on rb.
func (c *SvcRestart) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.ServiceAction(ctx, c.Service, "restart", c.DryRun, rep)
}
