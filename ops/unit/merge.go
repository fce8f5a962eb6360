package unit

import (
	"fmt"
	"strings"
)

// Located is one command of the effective ExecStart= list and where it is written.
type Located struct {
	Unit    *Unit
	Entry   *Entry // the ExecStart= assignment
	Command Command
}

// Effective is the effective ExecStart= of a unit with its drop-ins, and the
// one command that runs the engine.
type Effective struct {
	// Commands is the effective ExecStart= list in order (after resets).
	Commands []Located
	// Engine is the command that runs the inference engine; Unit names the
	// file it comes from (the main unit or a drop-in).
	Engine    Located
	Detection Detection

	files []*Unit // main first, then drop-ins in the order given
}

// File returns the file holding the engine's ExecStart=.
func (e *Effective) File() *Unit { return e.Engine.Unit }

// Argv returns the engine command's argv.
func (e *Effective) Argv() []string { return e.Engine.Command.Argv() }

// Spec reads the engine's speculative settings.
func (e *Effective) Spec() (Spec, error) {
	sp, err := readSpec(e.Argv(), e.Detection)
	if err == nil && e.Detection.Engine == SGLang {
		v, _ := e.EnvValue(EnvSkipZeroDraftExtend)
		sp.SkipZeroDraftExtend = envBool(v)
	}
	return sp, err
}

// EnvValue is the value the unit's [Service] Environment= assignments give
// key, in the files' order (a later assignment wins; an empty Environment=
// resets the list), and whether any does. Words are split on whitespace, a
// word's surrounding double or single quotes removed.
func (e *Effective) EnvValue(key string) (string, bool) {
	v, ok := "", false
	for _, u := range e.files {
		for _, en := range u.Entries {
			if en.Section != "Service" || en.Key != "Environment" {
				continue
			}
			if en.Value == "" {
				v, ok = "", false
			}
			for _, w := range strings.Fields(en.Value) {
				w = strings.Trim(w, `"'`)
				if val, found := strings.CutPrefix(w, key+"="); found {
					v, ok = val, true
				}
			}
		}
	}
	return v, ok
}

// EnvSkipZeroDraftExtend is SGLang's environment switch (sgl-project/sglang
// python/sglang/srt/environ.py, EnvBool(False); the EAGLE worker calls
// _stub_skipped_draft_extend instead of the draft extend when the adaptive
// steps are 0 and it is set): skip the draft model's extend at step 0. The
// draft KV goes stale: an upshift drafts from a cold state for a while.
const EnvSkipZeroDraftExtend = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"

// envBool is SGLang's EnvBool: true, 1, yes, y in any case (anything else,
// or unset, is its default False).
func envBool(v string) bool {
	switch strings.ToLower(v) {
	case "true", "1", "yes", "y":
		return true
	}
	return false
}

// Merge computes the effective ExecStart= of main with its drop-ins applied
// in the given order (systemd applies drop-ins in file name order; pass them
// sorted). An empty ExecStart= resets the list collected so far; every
// non-empty one appends. Errors: *SyntaxError (wrapped, naming the file) for a
// command line systemd would reject, *Error with CodeNoExecStart, CodeNoEngine,
// or CodeAmbiguous (several commands run an engine).
func Merge(main *Unit, dropins ...*Unit) (*Effective, error) {
	eff := &Effective{files: append([]*Unit{main}, dropins...)}
	for _, u := range eff.files {
		for i := range u.Entries {
			e := &u.Entries[i]
			if e.Section != "Service" || e.Key != "ExecStart" {
				continue
			}
			if e.Value == "" {
				eff.Commands = eff.Commands[:0]
				continue
			}
			cmds, err := e.ExecCommands()
			if err != nil {
				return nil, fmt.Errorf("parse ExecStart= in %s: %w", nameOf(u), err)
			}
			for _, c := range cmds {
				eff.Commands = append(eff.Commands, Located{Unit: u, Entry: e, Command: c})
			}
		}
	}
	if len(eff.Commands) == 0 {
		return nil, refuse(CodeNoExecStart, "%s has no ExecStart= in [Service]: nothing runs an engine", nameOf(main))
	}
	var found []int
	var firstErr error
	var det Detection
	for i := range eff.Commands {
		d, err := Detect(eff.Commands[i].Command.Argv())
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if len(found) == 0 {
			det = d
		}
		found = append(found, i)
	}
	switch len(found) {
	case 0:
		return nil, firstErr
	case 1:
		eff.Engine = eff.Commands[found[0]]
		eff.Detection = det
		return eff, nil
	default:
		return nil, refuse(CodeAmbiguous, "%s has %d ExecStart= commands that run an engine: editing one of them is ambiguous; keep one engine per unit", nameOf(main), len(found))
	}
}

func nameOf(u *Unit) string {
	if u.Name != "" {
		return u.Name
	}
	return "the unit"
}
