package ops

import (
	"errors"
	"fmt"

	"github.com/opsbot/opsbot/ops/unit"
)

// Steps 0 is speculative decoding off: the unit edit takes every speculative
// option out (ops/unit planOff) and `mtp undo` puts them back (the text that
// change replaced). Within one sweep or tune a later value needs them again:
// its Setting carries the unit the job found (Setting.from), and a value
// above 0 on a unit whose speculation an earlier value of the same job took
// out is planned on that unit and written over the one on disk (planBack).

// speculating reports whether d's engine command has speculative decoding.
func speculating(d *deployed) bool {
	sp, err := d.eff.Spec()
	return err == nil && sp.Present
}

// on reports whether s runs speculative decoding (steps above 0, or per load).
func (s Setting) on() bool { return s.Steps > 0 || s.perLoad != nil || s.adaptiveDefault }

// StepsText names a steps value for a person: "steps 3", or "steps 0
// (no speculative decoding)".
func StepsText(n int) string {
	if n == 0 {
		return "steps 0 (no speculative decoding)"
	}
	return fmt.Sprintf("steps %d", n)
}

// stepsMove says a change of steps: "steps 3 -> 10", "steps 3 -> 0
// (speculative decoding off)", "steps 0 -> 3 (speculative decoding on)".
func stepsMove(from, to int) string {
	out := fmt.Sprintf("steps %d -> %d", from, to)
	switch {
	case to == 0 && from != 0:
		out += " (speculative decoding off)"
	case from == 0 && to != 0:
		out += " (speculative decoding on)"
	}
	return out
}

// plan plans the unit edit that deploys s on d (see planOn), or, when an
// earlier value of the same job turned speculation off, on the unit the job
// found (planBack).
func (r *Runbook) plan(t *target, d *deployed, s Setting) (*planned, error) {
	if s.from != nil && s.from != d && s.on() && !speculating(d) {
		return r.planBack(t, d, s)
	}
	p, err := r.planOn(t, d, s)
	if err != nil && s.on() && errors.Is(err, unit.ErrNoSpeculation) {
		return nil, fmt.Errorf("%w. If an earlier change took it out (`mtp steps 0`), `mtp undo %s` puts back what that change replaced", err, t.name)
	}
	return p, err
}

// planBack plans s for a unit d on which this job turned speculation off:
// s is planned on the unit the job found (s.from) and written over d, which
// must be exactly what steps 0 made of that unit (else someone changed it
// since, and it is refused). In drop-in mode the drop-in steps 0 wrote gets
// the command line s runs.
func (r *Runbook) planBack(t *target, d *deployed, s Setting) (*planned, error) {
	base := s.from
	off, err := r.planWith(t, base, 0, unit.Options{})
	if err != nil {
		return nil, err
	}
	now, ok := d.files[off.path]
	if !ok || now != off.after {
		return nil, fmt.Errorf("%s runs no speculative decoding and is not what steps 0 made of the unit this job found: "+
			"it changed since (by hand, or another tool); nothing was changed", off.path)
	}
	p, err := r.planOn(t, base, s)
	if err != nil {
		return nil, err
	}
	after := p.after
	switch {
	case p.path == off.path:
	case off.created && p.path == base.mainPath:
		after = unit.DropIn(p.edit) // s is the unit's own setting; the drop-in says so
	default:
		return nil, fmt.Errorf("%s: steps 0 wrote %s and %s writes %s: cannot put speculation back in one write; `mtp undo %s` does",
			t.cfg.Unit, off.path, s, p.path, t.name)
	}
	sp, err := d.eff.Spec()
	if err != nil {
		return nil, err
	}
	e := *p.edit
	e.File, e.Before, e.After = off.path, now, after
	e.ArgvBefore, e.SpecBefore, e.Replacements = d.eff.Argv(), sp, nil
	e.Diff = unit.UnifiedDiff(off.path, now, after)
	e.Changed = nil
	for _, u := range e.SpecAfter.Uses {
		e.Changed = append(e.Changed, unit.Change{Flag: u.Flag, To: u.Value})
	}
	return &planned{edit: &e, path: off.path, before: now, after: after, files: p.files}, nil
}
