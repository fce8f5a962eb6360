package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var svcStartSpec = &Spec{
	Path:     "svc start",
	Summary:  "start a service and wait until it serves",
	Examples: []string{"svc start", "svc start qwen"},
	Policy:   Policy{Role: Operator, Mutating: true, Lock: LockService, Schedulable: true, Hosts: true, Reaps: true, Slash: true},
	new:      func() Command { return new(SvcStart) },
}

// SvcStart is `svc start [SERVICE]`: start a service and wait until it serves.
type SvcStart struct {
	On
	DryRun bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*SvcStart) Spec() *Spec { return svcStartSpec }

func (c *SvcStart) args() []arg { return []arg{service(&c.On), dryRun(&c.DryRun)} }

// Run runs the command's pipeline on rb.
func (c *SvcStart) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.ServiceAction(ctx, c.Service, "start", c.DryRun, rep)
}
