package commands

import (
	"context"
	"fmt"

	"github.com/opsbot/opsbot/ops"
)

var mtpPerLoadSpec = &Spec{
	Path:    "mtp per-load",
	Summary: "run a service's speculative decoding per load: the steps for each concurrency, as `mtp tune ... per-load` proposes",
	Details: "Deploys the engine's own per-load form of TABLE (concurrency:steps pairs; more steps after a slash are " +
		"candidates the engine may move between): for SGLang the adaptive config file at the service's adaptive_config " +
		"(written atomically next to the unit; no \"strategy\" key, so SGLang's ema, which runs a slot's 0) and the " +
		"unit flags --speculative-adaptive and --speculative-adaptive-config, starting at the first concurrency's steps " +
		"above 0, with --max-running-requests raised to the largest concurrency when one is above SGLang's cap of 48; " +
		"for vLLM num_speculative_tokens_per_batch_size inside --speculative-config (a k of 0 is no speculation at " +
		"those batch sizes; the largest k becomes num_speculative_tokens). 0 is no speculation at that load; a table " +
		"of zeros is `mtp steps 0`. With skip-zero-extend (SGLang, a slot holding only 0) the unit also gets " +
		"Environment=SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 above its ExecStart=: SGLang's step 0 then skips the draft " +
		"model's extend (a stream drafting again starts cold). It runs the mtp steps pipeline, verifies " +
		"that the engine runs per load and benchmarks at each concurrency; when the new settings do not serve it puts " +
		"back both the unit and the file. `mtp undo` restores both.",
	Examples: []string{"mtp per-load qwen 1:10 8:7 32:1 64:1", "mtp per-load 1:7 8:6 32:2 64:2/3 --dry-run", "mtp per-load qwen 1:9 8:5 32:1 64:0 skip-zero-extend"},
	Policy:   Policy{Role: Operator, Mutating: true, Confirm: true, Lock: LockService, Hosts: true, Reaps: true, Slash: true},
	new:      func() Command { return new(MTPPerLoad) },
}

// MTPPerLoad is `mtp per-load [SERVICE] TABLE`: deploy the engine's per-load speculative decoding.
type MTPPerLoad struct {
	On
	// Table is TABLE, concurrencies ascending.
	Table []LoadSteps `json:"table"`
	// SkipZeroExtend is the word skip-zero-extend: the unit sets SGLang's
	// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1.
	SkipZeroExtend bool `json:"skip_zero_extend,omitempty"`
	DryRun         bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*MTPPerLoad) Spec() *Spec { return mtpPerLoadSpec }

func (c *MTPPerLoad) args() []arg {
	return []arg{service(&c.On), loadTable(&c.Table), skipZeroArg(&c.SkipZeroExtend), dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *MTPPerLoad) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	rows := make([]ops.PerLoadRow, len(c.Table))
	for i, e := range c.Table {
		rows[i] = ops.PerLoadRow{Concurrency: e.Concurrency, Steps: e.Steps[0], Candidates: e.Steps}
	}
	return rb.ApplyPerLoadWith(ctx, c.Service, ops.PerLoadApply{Rows: rows, SkipZeroDraftExtend: c.SkipZeroExtend, DryRun: c.DryRun}, rep)
}

// Preview says what the command will do, for its confirmation.
func (c *MTPPerLoad) Preview() string {
	return c.preview("its per-load configuration (SGLang: the adaptive config file next to the unit, then the unit's flags; vLLM: the "+
		"per-batch table in --speculative-config)", "the unit and the file are")
}

// previewIn is Preview naming every file the change writes, in order, from
// the service's entry in opts: SGLang's adaptive config file, then the
// unit; vLLM's unit alone.
func (c *MTPPerLoad) previewIn(opts Options) string {
	for _, s := range opts.Services {
		switch {
		case s.Name != c.Service || s.Unit == "":
		case s.Engine == "vllm":
			return c.preview(fmt.Sprintf("the unit %s (the per-batch table in --speculative-config)", s.Unit), "the unit is")
		case s.Adaptive != "":
			return c.preview(fmt.Sprintf("two files: SGLang's adaptive config %s, then the unit %s (--speculative-adaptive and its config)", s.Adaptive, s.Unit),
				"the unit and the file are")
		}
	}
	return c.Preview()
}

func (c *MTPPerLoad) preview(writes, putBack string) string {
	text := Text(c)
	return fmt.Sprintf("`%s` will run %s's speculative decoding per load: stop %s on %s, clear its GPU memory, write %s, start it, "+
		"wait until it serves, verify it runs per load and benchmark at each concurrency. If it does not serve, %s put back. "+
		"(`%s --dry-run` shows each file's diff.)", text, c.Service, c.Service, c.Host, writes, putBack, text)
}

// LoadSteps is one entry of mtp per-load's TABLE: the steps for a
// concurrency, then other candidates the engine may move between.
type LoadSteps struct {
	Concurrency int   `json:"concurrency"`
	Steps       []int `json:"steps"` // at least one; the first is the steps for the concurrency
}
