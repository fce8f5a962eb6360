package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var svcStatusSpec = &Spec{
	Path:     "svc status",
	Summary:  "show a service's systemd state, restarts and readiness",
	Examples: []string{"svc status", "svc status qwen"},
	Policy:   Policy{Role: Viewer, Hosts: true, Slash: true, OnGroup: GroupEach},
	new:      func() Command { return new(SvcStatus) },
}

// SvcStatus is `svc status [SERVICE]`: systemd state, restarts and readiness.
type SvcStatus struct {
	On
}

// Spec returns the command's definition.
func (*SvcStatus) Spec() *Spec { return svcStatusSpec }

func (c *SvcStatus) args() []arg { return []arg{service(&c.On)} }

// Run runs the command's pipeline on rb.
func (c *SvcStatus) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return eachReplica(c.On, func(service string) (*ops.Result, error) { return rb.ServiceStatus(ctx, service, rep) })
}
