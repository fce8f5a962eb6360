package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/opsbot/opsbot/ops/systemd"
	"github.com/opsbot/opsbot/ops/unit"
)

// ApplyPerLoad is `mtp per-load [SERVICE] TABLE`: it deploys the engine's
// per-load form of rows (the TABLE a per-load tune proposes) through the mtp
// steps pipeline: stop, clear the GPUs, write SGLang's adaptive config file
// (atomically, at services.NAME.adaptive_config) and then the unit (or, for
// vLLM, the unit with its per-batch table), daemon-reload, start, wait until
// ready, verify that the engine runs it (/server_info's
// speculative_adaptive and its config path; vLLM's draft positions), then
// benchmark at each concurrency of the rows. When the new unit cannot be made
// to serve or does not run per load, the unit and the file are both put back
// (a file the change created is removed) and started again; `mtp undo`
// restores both. rows: ascending concurrencies, each with its steps first in
// Candidates or alone; 0 is no speculation at that load, and one value at
// least is above 0. SGLang starts at the first row's steps above 0
// (startSteps). For SGLang, a row above its cap of 48 running requests with
// speculation makes the unit raise the cap to the largest concurrency
// (--max-running-requests N, added when the unit does not set it): without
// it no batch reaches that slot. When that start runs out of GPU memory the
// change is rolled back as any other and the error gives the command that
// applies the table without the raise (the rows up to 48). Each benchmark
// line says how many requests queued at its concurrency (SGLang's
// /server_info max_running_requests).
func (r *Runbook) ApplyPerLoad(ctx context.Context, service string, rows []PerLoadRow, dryRun bool, rep Reporter) (*Result, error) {
	return r.ApplyPerLoadWith(ctx, service, PerLoadApply{Rows: rows, DryRun: dryRun}, rep)
}

// PerLoadApply is `mtp per-load [SERVICE] TABLE [skip-zero-extend]
// [--dry-run]`: the rows, and whether the unit sets SGLang's
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND (only with a slot that holds only
// 0: there its adaptive step 0 skips the draft model's extend).
type PerLoadApply struct {
	Rows                []PerLoadRow
	SkipZeroDraftExtend bool
	DryRun              bool
}

// ApplyPerLoadWith is ApplyPerLoad with a.SkipZeroDraftExtend.
func (r *Runbook) ApplyPerLoadWith(ctx context.Context, service string, a PerLoadApply, rep Reporter) (*Result, error) {
	rows, dryRun := a.Rows, a.DryRun
	if err := checkRows(rows); err != nil {
		return &Result{Incidents: []string{}}, fmt.Errorf("mtp per-load %s: %w; nothing was changed", service, err)
	}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if t.cfg.AdaptiveConfig == "" && t.cfg.Engine != "vllm" {
		return &Result{Incidents: []string{}}, fmt.Errorf("mtp per-load %s: services.%s.adaptive_config is not set; nothing was changed", service, service)
	}
	if a.SkipZeroDraftExtend && (t.cfg.Engine == "vllm" || !zeroOnlySlot(rows)) {
		return &Result{Incidents: []string{}}, fmt.Errorf("mtp per-load %s: %s is only for SGLang's adaptive table with a slot that holds only 0 "+
			"(steps 0 is where it skips the draft model's extend); nothing was changed", service, skipZeroWord)
	}
	set := Setting{Steps: startSteps(t.cfg.Engine, rows), perLoad: &perLoadSet{rows: rows, skipZero: a.SkipZeroDraftExtend}}
	res, err := r.mtpSet(ctx, service, set, dryRun, false, rep)
	if err != nil && res != nil && res.did.restored {
		err = capDidNotFit(service, rows, res, err)
	}
	if err != nil || dryRun {
		return res, err
	}
	at := make([]int, len(rows))
	for i, row := range rows {
		at[i] = row.Concurrency
	}
	pts, _, lines, err := r.benchAt(ctx, t, set, at, nil, res, rep)
	res.Points = append(res.Points, pts...)
	if err != nil {
		return res, err
	}
	res.Details = append(res.Details, lines...)
	res.Summary = fmt.Sprintf("%s now runs per load (%s); `mtp undo %s` puts back the unit and the file", service, perLoadCommand(rows, a.SkipZeroDraftExtend), service)
	return res, nil
}

// amongAt is the steps rows offer at concurrency c: the candidates of the
// row with the largest concurrency at or below c (SGLang's slot keys are
// lower bounds), or of the first row below them all.
func amongAt(rows []PerLoadRow, c int) []int {
	row := rows[0]
	for _, r := range rows {
		if r.Concurrency <= c {
			row = r
		}
	}
	if len(row.Candidates) == 0 {
		return []int{row.Steps}
	}
	return slices.Clone(row.Candidates)
}

// capDidNotFit is err of a per-load change that was rolled back and serves
// again, saying, when it raised SGLang's running-request cap and the start
// ran out of GPU memory on clear GPUs (settings_do_not_fit), that the raised
// cap did not fit (SGLang captures CUDA graphs for batches up to it) and the
// command that applies the table without it; else err as it is.
func capDidNotFit(service string, rows []PerLoadRow, res *Result, err error) error {
	n := raisesCap(res.Unit)
	var se *StartError
	if n == 0 || !errors.As(err, &se) || se.Diag.Cause != systemd.CauseSettingsDoNotFit {
		return err
	}
	msg := fmt.Sprintf("%v. The raised cap %s %d did not fit in GPU memory (SGLang captures CUDA graphs for batches up to it, each as wide as the largest candidate steps + 1)",
		err, unit.FlagMaxRunning, n)
	if within := tableRows(withinCap(rows)); len(within) > 0 && within[len(within)-1].Concurrency <= sglangSpecCap {
		msg += fmt.Sprintf(": apply the table without it, keeping SGLang's cap of %d (the slots above %d are then never used): `mtp per-load %s %s`",
			sglangSpecCap, sglangSpecCap, service, perLoadWords(within))
	} else {
		msg += fmt.Sprintf(": every row of the table is above SGLang's cap of %d; give a table from a lower concurrency, or fewer steps", sglangSpecCap)
	}
	return &capError{msg: msg, err: err}
}

// capError is a per-load change's error with what to apply instead; it
// unwraps to the change's error.
type capError struct {
	msg string
	err error
}

func (e *capError) Error() string { return e.msg }

func (e *capError) Unwrap() error { return e.err }

// checkRows checks a per-load table: concurrencies ascending from 1 up,
// steps and candidates within 0..32 (0: no speculation at that load), one
// of them above 0 at least (all 0 is mtp steps 0).
func checkRows(rows []PerLoadRow) error {
	if len(rows) == 0 {
		return errors.New("the table is empty")
	}
	on := false
	for i, row := range rows {
		if row.Concurrency < 1 || (i > 0 && row.Concurrency <= rows[i-1].Concurrency) {
			return fmt.Errorf("concurrencies must rise from 1 or more, each once: %s", perLoadWords(rows))
		}
		for _, n := range append([]int{row.Steps}, row.Candidates...) {
			if n < 0 || n > 32 {
				return fmt.Errorf("steps %d at concurrency %d: use 0..32", n, row.Concurrency)
			}
			on = on || n > 0
		}
	}
	if !on {
		return errors.New("every steps value of the table is 0: that is speculative decoding off at every load, `mtp steps 0`")
	}
	return nil
}
