package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var gpuStatusSpec = &Spec{
	Path:     "gpu status",
	Summary:  "show GPU memory and the processes holding it",
	Details:  "Without HOST: the only GPU host, or all of them when there are several.",
	Examples: []string{"gpu status", "gpu status gpu1"},
	Policy:   Policy{Role: Viewer, Hosts: true, Slash: true},
	new:      func() Command { return new(GPUStatus) },
}

// GPUStatus is `gpu status [HOST]`: GPU memory and who holds it; Host "" means every GPU host.
type GPUStatus struct {
	On // Host only: the named host, or "" for all
}

// Spec returns the command's definition.
func (*GPUStatus) Spec() *Spec { return gpuStatusSpec }

func (c *GPUStatus) args() []arg { return []arg{hostOf(&c.On)} }

// Run runs the command's pipeline on rb.
func (c *GPUStatus) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.GPUStatus(ctx, c.Host, rep)
}
