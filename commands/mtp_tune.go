package commands

import (
	"context"
	"slices"

	"github.com/opsbot/opsbot/ops"
)

var mtpTuneSpec = &Spec{
	Path:    "mtp tune",
	Summary: "find the steps value with the highest throughput at a load (or at each of several), with few restarts",
	Details: "Searches RANGE (a..b, default 1..16 within the steps limit; 0 is speculative decoding off) for the steps " +
		"value with the highest output tok/s at concurrency N (default: the configured concurrency): throughput over steps " +
		"rises to one peak and falls, so it narrows the range around the best value seen (a golden-section search) instead " +
		"of trying every value. Each value tried is one restart through the mtp steps pipeline and one benchmark. " +
		"It leaves the service on the best value and says in the thread which values it tried and why it stopped. " +
		"With per-load and at LIST (two concurrencies or more) it finds the best steps at each concurrency instead: " +
		"no speculation (steps 0) is measured first, whatever the range, then each value tried is started once and " +
		"benchmarked at every concurrency. The engine's per-load configuration of the best values (SGLang: the adaptive " +
		"config file at the service's adaptive_config and the unit flags that enable it; vLLM: " +
		"num_speculative_tokens_per_batch_size in --speculative-config) is then started itself and benchmarked at every " +
		"concurrency: only a configuration that started is proposed, with those figures. One that does not start (the " +
		"CUDA graphs of a raised --max-running-requests out of GPU memory, say) is dropped, saying why, for the best one " +
		"that fits (SGLang's cap of 48 left alone, the slots above it dropped), which is measured in turn. The first lines " +
		"give the command that applies it and its gain at each concurrency over the best single setting and over no " +
		"speculation. With compare it also measures what would run otherwise, at the same concurrencies: SGLang's own " +
		"default adaptive table (one more restart) and no speculation; vLLM: no speculation and the best single k. " +
		"The service is left on the steps it ran (its default_steps when set) and the adaptive file as it found it; " +
		"nothing is applied.",
	Examples: []string{"mtp tune", "mtp tune qwen 2..12 at 8", "mtp tune --dry-run", "mtp tune qwen per-load at 1,8,32,64",
		"mtp tune qwen per-load 1..12 at 1,8,32,64 compare"},
	Policy: Policy{Role: Operator, Mutating: true, Lock: LockService, Schedulable: true, Hosts: true, Reaps: true, Slash: true},
	new:    func() Command { return new(MTPTune) },
}

// MTPTune is `mtp tune [SERVICE] [per-load] [RANGE] [at N|LIST] [compare]`: search the steps with the highest throughput.
type MTPTune struct {
	On
	// PerLoad: the best steps at each concurrency of At (two or more, ascending).
	PerLoad bool `json:"per_load,omitempty"`
	// Compare (with PerLoad): measure SGLang's default adaptive table and no
	// speculation (vLLM: no speculation and the best single k) beside the proposal.
	Compare bool `json:"compare,omitempty"`
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
	return []arg{service(&c.On), perLoadArg(&c.PerLoad), rangeArg{from: &c.From, to: &c.To}, atArg{conc: &c.Concurrency, list: &c.At, per: &c.PerLoad},
		compareArg(&c.Compare), dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *MTPTune) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	if c.PerLoad {
		return rb.TunePerLoad(ctx, c.Service, ops.PerLoadOptions{At: c.At, From: c.From, To: c.To, Compare: c.Compare, DryRun: c.DryRun}, rep)
	}
	return rb.Tune(ctx, c.Service, ops.TuneOptions{From: c.From, To: c.To, Concurrency: c.Concurrency, DryRun: c.DryRun}, rep)
}

// check settles the at LIST against per-load: two or more concurrencies
// with per-load (sorted), one without.
func (c *MTPTune) check() (string, string) {
	path := mtpTuneSpec.Path
	switch {
	case c.Compare && !c.PerLoad:
		return path + " " + compareWord + " compares per-load configurations: it needs " + perLoadWord + " and two concurrencies or more",
			didYouMean(path + " " + nameOr(c.Service) + perLoadWord + " at 1,8,32,64 " + compareWord)
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

// restarts: one per steps value the search may try; per load also no
// speculation, the proposal and the fallbacks after it (ops.PerLoadStarts),
// the default table with compare, and leaving the service where it was.
func (c *MTPTune) restarts() int {
	n := c.To - c.From + 1
	if !c.PerLoad {
		return n
	}
	if c.From > 0 {
		n++ // no speculation, measured whatever the range
	}
	n += ops.PerLoadStarts + 1
	if c.Compare {
		n++
	}
	return n
}
