package commands

import (
	"context"
	"fmt"

	"github.com/opsbot/opsbot/ops"
)

var svcStopSpec = &Spec{
	Path:     "svc stop",
	Summary:  "stop a service (it stops serving)",
	Examples: []string{"svc stop qwen", "svc stop --dry-run"},
	Policy:   Policy{Role: Operator, Mutating: true, Confirm: true, Lock: LockService, Schedulable: true, Hosts: true, Slash: true},
	new:      func() Command { return new(SvcStop) },
}

// SvcStop is `svc stop [SERVICE]`: stop a service.
type SvcStop struct {
	On
	DryRun bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*SvcStop) Spec() *Spec { return svcStopSpec }

func (c *SvcStop) args() []arg { return []arg{service(&c.On), dryRun(&c.DryRun)} }

// Run runs the command's pipeline on rb.
func (c *SvcStop) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.ServiceAction(ctx, c.Service, "stop", c.DryRun, rep)
}

// Preview says what the command will do, for its confirmation.
func (c *SvcStop) Preview() string {
	return fmt.Sprintf("`%s` will stop %s on %s: it stops serving until started again.", Text(c), c.Service, c.Host)
}
