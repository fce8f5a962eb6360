package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var engineShowSpec = &Spec{
	Path:    "engine show",
	Summary: "show the engine flags `engine set` changes, as the unit sets them and as the running engine reports them",
	Details: "Reads the unit and, when the engine serves, what it reports: SGLang's /server_info; vLLM's /metrics " +
		"(gpu-memory-utilization) and /v1/models (max-model-len). A value the engine does not report shows as —.",
	Examples: []string{"engine show", "engine show qwen"},
	Policy:   Policy{Role: Viewer, Hosts: true},
	new:      func() Command { return new(EngineShow) },
}

// EngineShow is `engine show [SERVICE]`: the allowlisted engine flags of a
// service, in its unit and in its running engine.
type EngineShow struct {
	On
}

// Spec returns the command's definition.
func (*EngineShow) Spec() *Spec { return engineShowSpec }

func (c *EngineShow) args() []arg { return []arg{service(&c.On)} }

// Run runs the command's pipeline on rb.
func (c *EngineShow) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.EngineShow(ctx, c.Service, rep)
}
