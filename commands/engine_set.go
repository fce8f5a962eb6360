package commands

import (
	"context"
	"fmt"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/unit"
)

var engineSetSpec = &Spec{
	Path:    "engine set",
	Summary: "set one engine flag of a service (memory share, CUDA graph batch, running requests...), redeploy it and benchmark it",
	Details: "Changes one allowlisted flag of the engine's command line in the unit, byte-exactly (the value's bytes " +
		"replaced in place, or the flag added after the last option in the unit's style, or a switch removed), then " +
		"the pipeline of mtp steps: stop, clear GPU memory left by dead processes, write, start, wait until it serves, " +
		"verify (the value read back where the engine reports it: SGLang's /server_info; vLLM's /metrics for " +
		"gpu-memory-utilization and /v1/models for max-model-len; vLLM reports max-num-seqs nowhere, and the step says " +
		"so), benchmark. A unit that does not serve, or an engine that reports another value, gets its previous text back. " +
		"The value is checked as the engine checks it; a flag of the other engine is refused. `mtp undo` puts back what it replaced.",
	Examples: []string{"engine set mem-fraction-static 0.8", "engine set cuda-graph-max-bs 16 qwen --dry-run", "engine set disable-cuda-graph false"},
	Policy:   Policy{Role: Operator, Mutating: true, Confirm: true, Lock: LockService, Hosts: true, Reaps: true, OnGroup: GroupRollout},
	new:      func() Command { return new(EngineSet) },
}

// engine set and engine show are typed after /opsbot in Slack (Slash
// false): the Slack app needs no new slash command for them.

// EngineSet is `engine set FLAG VALUE [SERVICE]`: set one allowlisted
// engine flag (unit.EngineFlags) and redeploy. Flag is the flag's word
// ("mem-fraction-static"), Value as opsbot writes it ("0.8").
type EngineSet struct {
	On
	Flag   string `json:"flag"`
	Value  string `json:"value"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*EngineSet) Spec() *Spec { return engineSetSpec }

func (c *EngineSet) args() []arg {
	return []arg{engineFlagArg{v: &c.Flag}, engineValueArg{flag: &c.Flag, v: &c.Value}, service(&c.On), dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *EngineSet) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	if IsRollout(c) {
		return rb.Rollout(ctx, c.Service, c.rolloutChange(), c.DryRun, rep)
	}
	return rb.EngineSet(ctx, c.Service, c.Flag, c.Value, c.DryRun, rep)
}

// checkIn refuses a flag of the other engine when the configuration says
// which engine the service runs (the job checks the unit itself too).
func (c *EngineSet) checkIn(opts Options) (string, string) {
	f, _ := unit.LookupFlag(c.Flag)
	for _, s := range opts.Services {
		if s.Name != c.Service || s.Engine == "" || s.Engine == f.Engine {
			continue
		}
		prob := fmt.Sprintf("%s is %s's; %s runs %s", f.Name, engineLabel(f.Engine), c.Service, engineLabel(s.Engine))
		if other, ok := unit.LookupFlag(f.Counterpart); ok {
			return prob, fmt.Sprintf("its counterpart is %s: `engine set %s %s %s`", other.Name, other.Word(), c.Value, c.Service)
		}
		return prob, "`engine show " + c.Service + "` lists the flags of its engine"
	}
	return "", ""
}

func engineLabel(e string) string {
	if e == unit.VLLM {
		return "vLLM"
	}
	return "SGLang"
}

// Preview says what the command will do, for its confirmation.
func (c *EngineSet) Preview() string {
	text := Text(c)
	f, _ := unit.LookupFlag(c.Flag)
	return fmt.Sprintf("`%s` will set %s %s in the unit of %s: stop %s on %s, clear its GPU memory, write the unit, start it, "+
		"wait until it serves, read the value back from the engine and benchmark; a unit that does not serve gets its previous text back. "+
		"`mtp undo %s` puts back what it replaces. (`%s --dry-run` shows the diff.)", text, f.Name, c.Value, c.Service, c.Service, c.Host, c.Service, text)
}
