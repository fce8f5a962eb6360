package ops

import (
	"context"
	"fmt"

	"github.com/opsbot/opsbot/ops/unit"
)

// FlagSetting is an engine flag as `engine set` changed it and the engine
// reports it; its JSON is the "flag" object of `opsbot run --json`.
// Before and Unit are the unit's values ("" when the unit does not set the
// flag: the engine's default); Live is what the running engine reports,
// null when it reports nothing (vLLM's max_num_seqs) or was not asked.
type FlagSetting struct {
	Name   string  `json:"name"`
	Before string  `json:"before"`
	Unit   string  `json:"unit"`
	Live   *string `json:"live"`
}

// flagText names a flag's value in the unit: "--mem-fraction-static 0.8",
// "--disable-cuda-graph" (or "no --disable-cuda-graph"), "--cuda-graph-max-bs
// unset (the engine's default)".
func flagText(f unit.EngineFlag, v string) string {
	switch {
	case f.Kind == unit.KindBool && v == "true":
		return f.Name
	case f.Kind == unit.KindBool:
		return "no " + f.Name
	case v == "":
		return f.Name + " unset (the engine's default)"
	}
	return f.Name + " " + v
}

// EngineSet is `engine set FLAG VALUE`: it sets one allowlisted engine flag
// (unit.EngineFlags) in the service's unit, byte-exactly, and redeploys
// through the pipeline of `mtp steps`: stop, clear the GPUs, write, reload,
// start (rolling back when the new unit does not serve), wait until ready,
// verify (the speculative settings, and the flag read back where the
// engine reports it: verifyFlag), benchmark. A value the unit already has
// changes nothing on disk; the service is then only checked and measured.
// `mtp undo` puts back what it replaced. Result.Left is set on every return.
func (r *Runbook) EngineSet(ctx context.Context, service, flag, value string, dryRun bool, rep Reporter) (_ *Result, err error) {
	return r.engineSet(ctx, service, flag, value, dryRun, true, rep)
}

// engineSet is EngineSet; without benchmark it stops once the engine is
// verified.
func (r *Runbook) engineSet(ctx context.Context, service, flag, value string, dryRun, benchmark bool, rep Reporter) (_ *Result, err error) {
	f, ok := unit.LookupFlag(flag)
	if !ok {
		return nil, fmt.Errorf("%s is not an engine flag opsbot sets (`help engine set` lists them); nothing was changed", flag)
	}
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	serving := false
	defer func() {
		if !dryRun {
			r.leave(ctx, t, res, err == nil && serving)
		}
	}()
	st := begin(rep, "read unit", "reading %s on %s", t.cfg.Unit, t.cfg.Host)
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, st.fail(err)
	}
	from, _, err := d.eff.FlagValue(f)
	if err != nil {
		return res, st.fail(err)
	}
	p, err := r.planFlag(t, d, f, value)
	if err != nil {
		return res, st.fail(fmt.Errorf("%w; nothing was changed", err))
	}
	e := p.edit
	changed := len(e.Changed) > 0
	to, _ := f.ParseValue(value)
	res.Flag = &FlagSetting{Name: f.Name, Before: from, Unit: to}
	res.Unit = &UnitChange{Path: p.path, Before: p.before, After: p.after, ArgvBefore: e.ArgvBefore, ArgvAfter: e.ArgvAfter, Diff: e.Diff}
	if p.path != e.File {
		res.Unit.Diff = unit.UnifiedDiff(p.path, p.before, p.after)
	}
	res.Spec = specOf(e.Engine, e.SpecAfter)
	steps := e.SpecBefore.DraftSteps()
	res.did.unit, res.did.steps, res.did.oldSteps = UnitOld, steps, steps
	move := fmt.Sprintf("%s -> %s", flagText(f, from), flagText(f, to))
	if !changed {
		st.done("%s already has %s", t.cfg.Unit, flagText(f, to))
	} else {
		st.done("%s", move)
	}
	if err := r.checkReach(ctx, t); err != nil {
		return res, err
	}
	if dryRun {
		res.Summary = fmt.Sprintf("dry run: %s on %s, nothing changed", move, service)
		would := "would: " + wouldStop(t) + ", clear GPU memory held by dead engine processes, " +
			p.writesText() + ", daemon-reload, start, wait until ready, verify the engine's settings and " + f.Name + wouldRejoin(t)
		if benchmark {
			would += ", benchmark"
		}
		res.Details = append(res.Details, would)
		if res.Unit.Diff != "" {
			res.Details = append(res.Details, res.Unit.Diff)
		}
		return res, nil
	}
	if err := r.windDown(); err != nil && changed {
		return res, fmt.Errorf("not started: %w; nothing was changed on %s", err, service)
	}
	if changed {
		if err := r.deploy(ctx, t, p, res, rep); err != nil {
			return res, err
		}
	} else if err := r.ensureServing(ctx, t, res, rep); err != nil {
		return res, err
	}
	verr := r.verify(ctx, t, res, rep)
	if verr == nil {
		verr = r.verifyFlag(ctx, t, f, to, res, rep)
	}
	if verr != nil {
		if !changed || ctx.Err() != nil {
			return res, verr
		}
		return res, r.rollbackAfter(ctx, t, p, res, rep, verr)
	}
	serving = true
	if !benchmark {
		res.Summary = fmt.Sprintf("%s on %s, serving", move, service)
		return res, nil
	}
	if err := r.windDown(); err != nil {
		res.Summary = fmt.Sprintf("%s on %s, serving; benchmark skipped", move, service)
		return res, fmt.Errorf("benchmark skipped: %w; %s serves %s", err, service, flagText(f, to))
	}
	b, err := r.benchmark(ctx, t, BenchParams{}, res, rep)
	if err != nil {
		if ctx.Err() != nil {
			serving = false
			return res, err
		}
		return res, fmt.Errorf("%w; %s serves %s (`mtp undo %s` puts back what this job replaced)", err, service, flagText(f, to), service)
	}
	res.Summary = fmt.Sprintf("%s on %s: %s", move, service, b)
	return res, nil
}

// planFlag plans setting f to value on d: the unit's own file, or in
// drop-in mode the drop-in (as planWith does for the steps).
func (r *Runbook) planFlag(t *target, d *deployed, f unit.EngineFlag, value string) (*planned, error) {
	e, err := d.eff.SetFlag(f, value)
	if err != nil {
		return nil, err
	}
	from, _, _ := d.eff.FlagValue(f)
	to, _ := f.ParseValue(value)
	p := &planned{edit: e, path: e.File, before: e.Before, after: e.After, was: flagText(f, from), now: flagText(f, to)}
	if t.cfg.DropIn && e.File == d.mainPath && len(e.Changed) > 0 {
		p.path = d.mainPath + ".d/opsbot.conf"
		before, exists := d.files[p.path]
		p.before, p.created, p.after = before, !exists, unit.DropIn(e)
	}
	return p, nil
}
