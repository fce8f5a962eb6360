package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var svcLogsSpec = &Spec{
	Path:     "svc logs",
	Summary:  "show the last journal lines of a service",
	Examples: []string{"svc logs", "svc logs qwen lines=200"},
	Policy:   Policy{Role: Viewer, Hosts: true, Slash: true},
	new:      func() Command { return new(SvcLogs) },
}

// SvcLogs is `svc logs [SERVICE] [lines=N]`: the last journal lines.
type SvcLogs struct {
	On
	Lines int `json:"lines"` // default 50
}

// Spec returns the command's definition.
func (*SvcLogs) Spec() *Spec { return svcLogsSpec }

func (c *SvcLogs) args() []arg { return []arg{service(&c.On), keyed(&keyLines, &c.Lines)} }

// Run runs the command's pipeline on rb.
func (c *SvcLogs) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.ServiceLogs(ctx, c.Service, c.Lines, rep)
}
