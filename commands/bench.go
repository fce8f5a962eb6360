package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var benchSpec = &Spec{
	Path:    "bench",
	Summary: "benchmark a service (tok/s, latency, acceptance)",
	Details: "Streams random prompts of a fixed length at the given concurrency, like sglang's bench_serving. " +
		"Unset knobs use the configured defaults. Locks the service: it never runs while the service is being changed.",
	Examples: []string{"bench", "bench qwen prompts=200 concurrency=16", "bench in=1024 out=256"},
	Policy:   Policy{Role: Operator, Mutating: true, Lock: LockService, Schedulable: true, Hosts: true, Reaps: true, Slash: true},
	new:      func() Command { return new(Bench) },
}

// Bench is `bench [SERVICE] [prompts=N] [concurrency=N] [in=N] [out=N]`: benchmark a service.
type Bench struct {
	On
	// Params are the key=N arguments; 0 means the configured default.
	Params ops.BenchParams `json:"params"`
	DryRun bool            `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*Bench) Spec() *Spec { return benchSpec }

func (c *Bench) args() []arg {
	return []arg{service(&c.On), keyed(&keyPrompts, &c.Params.Prompts), keyed(&keyConcurrency, &c.Params.Concurrency), keyed(&keyIn, &c.Params.InputLen), keyed(&keyOut, &c.Params.OutputLen), dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *Bench) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.Bench(ctx, c.Service, c.Params, c.DryRun, rep)
}
