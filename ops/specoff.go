package ops

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// Steps 0 is speculative decoding off: the unit edit takes every speculative
// option out (ops/unit planOff) and `mtp undo` puts them back (the text that
// change replaced).
//
// A sweep or tune deploys one value after another; each is planned on the
// unit the job found (Setting.from, a *found) and written over what the job
// left on disk: a value after 0 gets its speculative options back, and
// what one value added (a per-load table's --max-running-requests) does not
// stay for the next. What is on disk must be the unit as found or a text the
// job planned; anything else changed by hand meanwhile, and is refused.

// found is the unit as a sweep or tune found it, and the texts the job
// planned since (by path), so that it knows its own writes.
type found struct {
	d       *deployed
	planned map[string]map[string]bool
}

func foundUnit(d *deployed) *found { return &found{d: d, planned: map[string]map[string]bool{}} }

func (f *found) note(path, text string) {
	if f.planned[path] == nil {
		f.planned[path] = map[string]bool{}
	}
	f.planned[path][text] = true
}

// ours reports whether text at path is the unit as found or a text the job planned.
func (f *found) ours(path, text string, exists bool) bool {
	base, had := f.d.files[path]
	return (exists && ((had && text == base) || f.planned[path][text])) || (!exists && !had)
}

// on reports whether s runs speculative decoding (steps above 0, or per load).
func (s Setting) on() bool { return s.Steps > 0 || s.perLoad != nil || s.adaptiveDefault }

// StepsText names a steps value for a person: "steps 3", or "no
// speculative decoding (steps 0)".
func StepsText(n int) string {
	if n == 0 {
		return "no speculative decoding (steps 0)"
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

// plan plans the unit edit that deploys s on d (see planOn), or, in a sweep
// or tune, on the unit the job found (planFound).
func (r *Runbook) plan(t *target, d *deployed, s Setting) (*planned, error) {
	if s.from != nil && s.from.d != d {
		return r.planFound(t, d, s)
	}
	p, err := r.planOn(t, d, s)
	if err != nil && s.on() && errors.Is(err, unit.ErrNoSpeculation) {
		return nil, fmt.Errorf("%w. If an earlier change took it out (`mtp steps 0`), `mtp undo %s` puts back what that change replaced", err, t.name)
	}
	if err == nil && s.from != nil {
		s.from.note(p.path, p.after)
	}
	return p, err
}

// planFound plans s on the unit the job found (s.from) and writes it over
// d, what is on disk now: the path planned, or in drop-in mode the drop-in
// the job created (it then gets the command line s runs). It is refused when
// that file is neither the unit as found nor a text the job planned. When
// planning on d gives the same text, that plan is taken (its changes are
// d's).
func (r *Runbook) planFound(t *target, d *deployed, s Setting) (*planned, error) {
	f := s.from
	p, err := r.planOn(t, f.d, s)
	if err != nil {
		return nil, err
	}
	path, after := p.path, p.after
	dropIn := f.d.mainPath + ".d/opsbot.conf"
	if _, had := f.d.files[dropIn]; t.cfg.DropIn && p.path == f.d.mainPath && !had {
		if _, now := d.files[dropIn]; now {
			path, after = dropIn, unit.DropIn(p.edit) // the unit's own command line, in the drop-in the job made
		}
	}
	now, exists := d.files[path]
	if !f.ours(path, now, exists) {
		return nil, fmt.Errorf("%s changed since this job read it (by hand, or another tool): it is neither the unit as found nor a text the job wrote; nothing was changed", path)
	}
	f.note(path, after)
	if pd, err := r.planOn(t, d, s); err == nil && pd.path == path && pd.after == after {
		return pd, nil
	}
	sp, err := d.eff.Spec()
	if err != nil {
		return nil, err
	}
	e := *p.edit
	e.File, e.Before, e.After = path, now, after
	e.ArgvBefore, e.SpecBefore, e.Replacements = d.eff.Argv(), sp, nil
	e.Diff = unit.UnifiedDiff(path, now, after)
	e.Changed = argvChanges(e.ArgvBefore, e.ArgvAfter)
	return &planned{edit: &e, path: path, before: now, after: after, created: !exists, files: p.files}, nil
}

// argvChanges lists the options whose value differs between two command
// lines (--opt V and --opt=V alike; a flag without a value has value "").
func argvChanges(before, after []string) []unit.Change {
	b, a := options(before), options(after)
	var out []unit.Change
	for _, o := range a.order {
		if v, ok := b.val[o]; !ok || v != a.val[o] {
			out = append(out, unit.Change{Flag: o, From: b.val[o], To: a.val[o]})
		}
	}
	for _, o := range b.order {
		if _, ok := a.val[o]; !ok {
			out = append(out, unit.Change{Flag: o, From: b.val[o], To: "(removed)"})
		}
	}
	return out
}

type optionSet struct {
	order []string
	val   map[string]string
}

func options(argv []string) optionSet {
	s := optionSet{val: map[string]string{}}
	for i := 0; i < len(argv); i++ {
		w := argv[i]
		if !strings.HasPrefix(w, "--") || w == "--" {
			continue
		}
		name, v, eq := strings.Cut(w, "=")
		if !eq && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "--") {
			v = argv[i+1]
			i++
		}
		if _, seen := s.val[name]; !seen {
			s.order = append(s.order, name)
		}
		s.val[name] = v
	}
	return s
}
