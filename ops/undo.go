package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// ChangeLog is where `mtp undo` finds what to undo: the unit changes jobs
// wrote, from the job history. Implementations must be safe for concurrent use.
type ChangeLog interface {
	// UnitChanges returns the changes jobs wrote to service's unit, newest
	// first, at most limit: every job whose result records a unit change it
	// made (succeeded, or failed or cancelled after writing), the unit's text
	// or only a file beside it (UnitChange.Files: a per-load table re-applied
	// with the same unit), leaving out dry runs and jobs that found nothing
	// to change.
	UnitChanges(ctx context.Context, service string, limit int) ([]AppliedChange, error)
}

// AppliedChange is one job's change of a service's unit, as its result recorded it.
type AppliedChange struct {
	JobID   int64
	Command string // the job's canonical command ("mtp steps 10 qwen")
	Status  string // the job's final status: "succeeded", "failed", "cancelled", ...
	Unit    UnitChange
	// Rollout is the record of a rollout job (its Result.Rollout): the
	// changes it made on each replica of a group; Unit is then empty.
	Rollout *RolloutResult
}

func (c AppliedChange) label() string { return fmt.Sprintf("#%d `%s`", c.JobID, c.Command) }

// undoLookback is how many recent unit changes mtp undo reads.
const undoLookback = 50

// NothingToUndoError is returned by MTPUndo when no job changed the
// service's unit and succeeded. Nothing was changed.
type NothingToUndoError struct{ Service string }

func (e *NothingToUndoError) Error() string {
	return fmt.Sprintf("nothing to undo on %s: no job has changed its unit and succeeded (`jobs all` lists the recent jobs); nothing was changed", e.Service)
}

// lastUndoable is the index in changes (newest first) of the change `mtp
// undo` puts back: the newest that succeeded, or a rollout that ended any
// other way (interrupted: its record is its last checkpoint, see
// rollout.go; failed or cancelled with a rollback that could not finish)
// with replicas still changed; -1 when none.
func lastUndoable(changes []AppliedChange) int {
	for i, c := range changes {
		if c.Status == "succeeded" || c.Rollout.Changed() {
			return i
		}
	}
	return -1
}

// CheckUndoable is *NothingToUndoError when changes holds nothing `mtp undo`
// would put back on service, else nil (also when the history cannot be
// read: the job then says why). The door asks it before it asks to confirm
// an undo, so that one with nothing to undo is refused at once.
func CheckUndoable(ctx context.Context, changes ChangeLog, service string) error {
	if changes == nil {
		return nil
	}
	list, err := changes.UnitChanges(ctx, service, undoLookback)
	if err != nil || lastUndoable(list) >= 0 {
		return nil
	}
	return &NothingToUndoError{Service: service}
}

// UnitChangedError is returned by MTPUndo when the unit no longer holds what
// the change to undo wrote: undoing it would throw away a later change.
// Nothing was changed.
type UnitChangedError struct {
	Service string
	Path    string
	Undo    AppliedChange  // the change that would have been undone
	By      *AppliedChange // the later job whose change the unit holds now; nil when unknown
	// Rebuilt: the change was made on hosts built anew since (Config.RebuiltAfter).
	Rebuilt bool
}

func (e *UnitChangedError) Error() string {
	if e.Rebuilt && e.By == nil {
		return fmt.Sprintf("cannot undo %s: it was made on a lab that has been rebuilt since (each `opsbot run --config FILE --lab` starts a new lab, "+
			"its units as the lab seeds them, and only the store lasts), so %s no longer holds it. Nothing was changed; "+
			"`mtp show %s` shows what runs now, `mtp steps N %s` sets a value", e.Undo.label(), e.Path, e.Service, e.Service)
	}
	by := "not by an opsbot job (by hand, or another tool); `mtp show " + e.Service + "` shows what it runs now"
	if e.By != nil {
		by = fmt.Sprintf("by job %s (%s), whose change it holds now; `job %d` shows it", e.By.label(), e.By.Status, e.By.JobID)
	}
	return fmt.Sprintf("cannot undo %s: %s changed since, %s. Nothing was changed; set the value you want with `mtp steps N %s`",
		e.Undo.label(), e.Path, by, e.Service)
}

// MTPUndo is `mtp undo`: it puts back the unit text and the files beside it
// (UnitChange.Files) that the service's last successful change (an `mtp
// steps`, an `mtp per-load`, even one that changed only the file, or an
// earlier `mtp undo`) replaced, through
// the change pipeline of `mtp steps`: stop, clear the GPUs, write, reload,
// start (rolling back when it cannot be made to serve), wait until ready,
// verify and benchmark. It refuses, changing nothing, when there is nothing to
// undo (*NothingToUndoError) or when the unit changed since that change
// (*UnitChangedError).
func (r *Runbook) MTPUndo(ctx context.Context, service string, dryRun bool, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	group := r.IsGroup(service)
	var t *target
	if !group {
		var err error
		if t, err = r.target(service); err != nil {
			return nil, err
		}
	}
	var st *step
	if group {
		st = begin(rep, "find change", "looking for the last rollout of %s that succeeded", service)
	} else {
		st = begin(rep, "find change", "looking for the last change of %s that succeeded", t.cfg.Unit)
	}
	if r.cfg.Changes == nil {
		return res, st.fail(errors.New("mtp undo needs the job history, and this opsbot was started without one; nothing was changed"))
	}
	changes, err := r.cfg.Changes.UnitChanges(ctx, service, undoLookback)
	if err != nil {
		return res, st.fail(fmt.Errorf("read the unit changes of %s: %w", service, err))
	}
	last := lastUndoable(changes)
	if last < 0 {
		return res, st.fail(&NothingToUndoError{Service: service})
	}
	undo := changes[last]
	if group {
		st.done("%s", undo.label())
		return r.rolloutUndo(ctx, service, changes, dryRun, rep)
	}
	st.done("%s changed %s", undo.label(), undo.Unit.Path)
	return r.putBack(ctx, t, undo, changes[:last], dryRun, true, res, rep)
}

// putBack is mtp undo of one change on t, found (undo; later are the
// changes of service recorded since, newest first: the one whose text the
// unit holds now is named when it refuses): it puts back the unit text and
// the files beside it that undo replaced, byte-exactly, through the change
// pipeline of mtp steps, verifies, and, with benchmark, benchmarks. It
// refuses, changing nothing, when the unit or a file changed since
// (*UnitChangedError). Result.Left is set on every return that acted.
func (r *Runbook) putBack(ctx context.Context, t *target, undo AppliedChange, later []AppliedChange, dryRun, benchmark bool, res *Result, rep Reporter) (_ *Result, err error) {
	service := t.name
	serving := false
	defer func() {
		if !dryRun && res.did.changed {
			r.leave(ctx, t, res, err == nil && serving)
		}
	}()
	st := begin(rep, "read unit", "reading %s on %s", t.cfg.Unit, t.cfg.Host)
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, st.fail(err)
	}
	path := undo.Unit.Path
	current, exists := d.files[path]
	if !exists || current != undo.Unit.After {
		ce := &UnitChangedError{Service: service, Path: path, Undo: undo, Rebuilt: undo.JobID <= r.cfg.RebuiltAfter}
		for i := range later {
			if later[i].Unit.Path == path && later[i].Unit.After == current {
				ce.By = &later[i]
				break
			}
		}
		return res, st.fail(ce)
	}
	p, before, after, err := planUndo(d, path, undo.Unit.Before)
	if err != nil {
		return res, st.fail(fmt.Errorf("the text %s replaced: %w", undo.label(), err))
	}
	// The files the change wrote beside the unit go back with it, if they
	// still hold what it wrote.
	for _, f := range undo.Unit.Files {
		b, exists, err := readRegular(ctx, t, f.Path)
		if err != nil {
			return res, st.fail(besideRefused(err))
		}
		if (f.Removed && exists) || (!f.Removed && (!exists || b != f.After)) {
			return res, st.fail(fmt.Errorf("cannot undo %s: %s changed since it was written (by hand, or another tool). Nothing was changed; "+
				"`mtp steps N %s` sets a single value", undo.label(), f.Path, service))
		}
		back := FileChange{Path: f.Path, Before: b, After: f.Before, Created: f.Removed, Removed: f.Created}
		if !back.Removed {
			back.Diff = unit.UnifiedDiff(f.Path, back.Before, back.After)
		}
		p.files = append(p.files, back)
	}
	res.Unit = &UnitChange{Path: path, Before: current, After: p.after, ArgvBefore: before.argv, ArgvAfter: after.argv,
		Diff: unit.UnifiedDiff(path, current, p.after), Files: p.files}
	res.Spec = specOf(after.engine, after.spec)
	move, flags := undoMoves(before, after)
	st.done("undo %s: %s", undo.label(), move)
	if dryRun {
		res.Summary = fmt.Sprintf("dry run: mtp undo would put back what %s replaced on %s (%s); nothing changed", undo.label(), service, move)
		res.Details = append(res.Details, "would: "+wouldStop(t)+", clear GPU memory held by dead engine processes, "+
			p.writesText()+", daemon-reload, start, wait until ready, verify /server_info"+wouldRejoin(t)+", benchmark")
		res.Details = append(res.Details, filesText(p.files)...)
		if res.Unit.Diff != "" {
			res.Details = append(res.Details, res.Unit.Diff)
		}
		return res, nil
	}
	if err := r.deploy(ctx, t, p, res, rep); err != nil {
		return res, err
	}
	if err := r.verify(ctx, t, res, rep); err != nil {
		return res, err
	}
	for _, f := range flags {
		want := after.flags[f.Name]
		if want == "" && f.Kind == unit.KindBool {
			want = "false"
		}
		if want == "" {
			continue // back to the engine's default: nothing the unit says to compare
		}
		if err := r.verifyFlag(ctx, t, f, want, res, rep); err != nil {
			return res, err
		}
	}
	serving = true
	if !benchmark {
		res.Summary = fmt.Sprintf("undid %s on %s: %s, serving", undo.label(), service, move)
		return res, nil
	}
	b, err := r.benchmark(ctx, t, BenchParams{}, res, rep)
	if err != nil {
		return res, err
	}
	res.Summary = fmt.Sprintf("undid %s on %s: %s: %s", undo.label(), service, move, b)
	return res, nil
}

// engineSide is the engine command of one version of a unit.
type engineSide struct {
	engine string
	spec   unit.Spec
	argv   []string
	flags  map[string]string // the allowlisted engine flags it sets (unit.EngineFlags), by name
}

func sideOf(eff *unit.Effective) (engineSide, error) {
	sp, err := eff.Spec()
	if err != nil {
		return engineSide{}, err
	}
	side := engineSide{engine: eff.Detection.Engine, spec: sp, argv: eff.Argv(), flags: map[string]string{}}
	for _, f := range unit.EngineFlags {
		if f.Engine != side.engine {
			continue
		}
		if v, set, err := eff.FlagValue(f); err == nil && set {
			side.flags[f.Name] = v
		}
	}
	return side, nil
}

// undoMoves says what putting after back over before changes: the steps
// when they differ, and each allowlisted engine flag whose value differs
// (what `engine set` changes); flags lists those flags.
func undoMoves(before, after engineSide) (text string, flags []unit.EngineFlag) {
	var parts []string
	from, to := before.spec.DraftSteps(), after.spec.DraftSteps()
	for _, f := range unit.EngineFlags {
		if f.Engine != after.engine || before.flags[f.Name] == after.flags[f.Name] {
			continue
		}
		flags = append(flags, f)
		parts = append(parts, fmt.Sprintf("%s -> %s", flagText(f, before.flags[f.Name]), flagText(f, after.flags[f.Name])))
	}
	if from != to || len(parts) == 0 {
		parts = append([]string{stepsMove(from, to)}, parts...)
	}
	return strings.Join(parts, ", "), flags
}

// planUndo plans writing text to path (a file of d): the deploy of mtp steps
// with the current text as what a rollback restores. It checks that the unit
// with text in place still runs an engine whose settings can be read.
func planUndo(d *deployed, path, text string) (*planned, engineSide, engineSide, error) {
	var before, after engineSide
	before, err := sideOf(d.eff)
	if err != nil {
		return nil, before, after, err
	}
	var units []*unit.Unit
	for _, p := range d.order {
		body := d.files[p]
		if p == path {
			body = text
		}
		u, err := unit.Parse(p, body)
		if err != nil {
			return nil, before, after, fmt.Errorf("parse %s: %w", p, err)
		}
		units = append(units, u)
	}
	eff, err := unit.Merge(units[0], units[1:]...)
	if err != nil {
		return nil, before, after, err
	}
	if after, err = sideOf(eff); err != nil {
		return nil, before, after, err
	}
	e := &unit.Edit{File: path, Engine: after.engine, Before: d.files[path], After: text,
		ArgvBefore: before.argv, ArgvAfter: after.argv, SpecBefore: before.spec, SpecAfter: after.spec}
	return &planned{edit: e, path: path, before: d.files[path], after: text}, before, after, nil
}
