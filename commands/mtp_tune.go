package commands

import (
	"context"
	"slices"

	"github.com/opsbot/opsbot/ops"
)

var mtpTuneSpec = &Spec{
	Path:    "mtp tune",
	Summary: "find the steps value with the highest throughput at a load (or at each of several), with few restarts",
	Details: "Searches RANGE (a..b, default 1..16 within the steps limit) for the steps value with the highest " +
		"output tok/s at concurrency N (default: the configured concurrency): throughput over steps rises to one " +
		"peak and falls, so it narrows the range around the best value seen (a golden-section search) instead " +
		"of trying every value. Each value tried is one restart through the mtp steps pipeline and one benchmark. " +
		"It leaves the service on the best value and says in the thread which values it tried and why it stopped. " +
		"With per-load and at LIST (two concurrencies or more) it finds the best steps at each concurrency instead: " +
		"each value tried is started once and benchmarked at every concurrency, and it proposes the engine's own " +
		"per-load configuration (SGLang: the adaptive config file at the service's adaptive_config and the unit " +
		"flags that enable it; vLLM: num_speculative_tokens_per_batch_size in --speculative-config) with a table " +
		"per concurrency, the gain over the best single setting and the diffs; the service is left on the steps " +
		"it ran and nothing else is changed.",
	Examples: []string{"mtp tune", "mtp tune qwen 2..12 at 8", "mtp tune --dry-run", "mtp tune qwen per-load at 1,8,32,64"},
	Policy:   Policy{Role: Operator, Mutating: true, Lock: LockService, Schedulable: true, Hosts: true, Slash: true},
	new:      func() Command { return new(MTPTune) },
}

// MTPTune is `mtp tune [SERVICE] [per-load] [RANGE] [at N|LIST]`: search the steps with the highest throughput.
type MTPTune struct {
	On
	// PerLoad: the best steps at each concurrency of At (two or more, ascending).
	PerLoad bool `json:"per_load,omitempty"`
	From    int  `json:"from"` // the lowest steps searched (default 1)
	To      int  `json:"to"`   // the highest steps searched (default min(16, the steps limit))
	// At are the concurrencies of the per-load form, ascending; nil otherwise.
	At []int `json:"at,omitempty"`
	// Concurrency is the one concurrency benchmarked at (0: the configured one); 0 with per-load.
	Concurrency int  `json:"concurrency,omitempty"`
	DryRun      bool `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*MTPTune) Spec() *Spec { return mtpTuneSpec }

func (c *MTPTune) args() []arg {
	return []arg{service(&c.On), perLoadArg{v: &c.PerLoad}, rangeArg{from: &c.From, to: &c.To}, atArg{conc: &c.Concurrency, list: &c.At, per: &c.PerLoad}, dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *MTPTune) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	if c.PerLoad {
		return rb.TunePerLoad(ctx, c.Service, ops.PerLoadOptions{At: c.At, From: c.From, To: c.To, DryRun: c.DryRun}, rep)
	}
	return rb.Tune(ctx, c.Service, ops.TuneOptions{From: c.From, To: c.To, Concurrency: c.Concurrency, DryRun: c.DryRun}, rep)
}

// check settles the at LIST against per-load: two or more concurrencies
// with per-load (sorted), one without.
func (c *MTPTune) check() (string, string) {
	path := mtpTuneSpec.Path
	switch {
	case c.PerLoad && len(c.At) < 2:
		return path + " " + perLoadWord + " needs two concurrencies or more after at", didYouMean(path + " " + nameOr(c.Service) + perLoadWord + " at 1,8,32,64")
	case !c.PerLoad && len(c.At) > 1:
		return path + " benchmarks at one concurrency; to tune for several, say " + perLoadWord, didYouMean(path + " " + nameOr(c.Service) + perLoadWord + " at " + formatList(c.At))
	case c.PerLoad:
		c.At, c.Concurrency = slices.Sorted(slices.Values(c.At)), 0
	default:
		c.At = nil
	}
	return "", ""
}

// restarts: one per steps value the search may try.
func (c *MTPTune) restarts() int { return c.To - c.From + 1 }
