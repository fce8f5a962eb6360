package commands

import (
	"context"
	"fmt"

	"github.com/opsbot/opsbot/ops"
)

var gpuRecoverSpec = &Spec{
	Path:    "gpu recover",
	Summary: "stop a service, kill what holds its GPU memory, start it fresh",
	Details: "Stops the service (and its restart loop), SIGTERMs then SIGKILLs its own engine processes still " +
		"holding its GPUs (its unit's, or orphaned from it; never a neighbour's, which are named instead; from " +
		"the Proxmox node when the service runs in a container), waits until its GPUs are clear, then starts " +
		"the service and waits until it serves. HOST is resolved to the service on it.",
	Examples: []string{"gpu recover", "gpu recover gpu1 --no-start", "gpu recover qwen --dry-run"},
	RoleNote: "admin with --force",
	Policy:   Policy{Role: Operator, Mutating: true, Confirm: true, Lock: LockService, Schedulable: true, Hosts: true, Reaps: true, Slash: true},
	new:      func() Command { return new(GPURecover) },
}

// GPURecover is `gpu recover [HOST|SERVICE]`: stop a service, kill what holds its GPU memory, start it fresh.
type GPURecover struct {
	On
	NoStart bool `json:"no_start,omitempty"` // leave it stopped
	Force   bool `json:"force,omitempty"`    // also non-engine holders of its own; needs admin
	DryRun  bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*GPURecover) Spec() *Spec { return gpuRecoverSpec }

func (c *GPURecover) args() []arg {
	return []arg{target(&c.On), flagOf(&flagNoStart, &c.NoStart), flagOf(&flagForce, &c.Force), dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *GPURecover) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.GPURecover(ctx, c.Service, ops.RecoverOptions{NoStart: c.NoStart, Force: c.Force, DryRun: c.DryRun}, rep)
}

// raiseRole: --force needs admin.
func (c *GPURecover) raiseRole(r Role) Role {
	if c.Force && r < Admin {
		return Admin
	}
	return r
}

// Preview says what the command will do, for its confirmation.
func (c *GPURecover) Preview() string {
	s := fmt.Sprintf("`%s` will stop %s on %s, SIGTERM then SIGKILL the engine processes holding its GPU memory", Text(c), c.Service, c.Host)
	if c.Force {
		s += " (with --force: also non-engine holders, never the NVIDIA daemons)"
	}
	if c.NoStart {
		return s + ", and leave it stopped."
	}
	return s + ", then start it fresh and wait until it serves."
}
