package unit

import (
	"fmt"
	"slices"
	"strings"
)

// flagUses finds every use of f in the engine's argv (up to a "--"), as the
// engine's parser reads them: --opt V and --opt=V (vLLM: underscores for
// dashes too). A word that abbreviates f is refused: argparse would take it
// for f, and an edit that left it would not change what runs.
func flagUses(argv []string, d Detection, f EngineFlag) ([]FlagUse, error) {
	var out []FlagUse
	for i := d.ArgsStart; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "--") || len(a) < 3 {
			continue
		}
		name, val, eq := strings.Cut(a, "=")
		norm := name
		if d.Engine == VLLM {
			norm = "--" + strings.ReplaceAll(name[2:], "_", "-")
		}
		if norm != f.Name {
			if len(norm) >= 6 && strings.HasPrefix(f.Name, norm) {
				return nil, refuse(CodeUnsupported, "the unit writes %s, which the engine reads as %s: write the full option name in the unit, then try again", name, f.Name)
			}
			continue
		}
		use := FlagUse{Flag: f.Name, Written: name, NameIndex: i, ValueIndex: i}
		switch {
		case f.Kind == KindBool && eq:
			return nil, refuse(CodeInvalid, "%s takes no value (the unit writes %s): the engine refuses to start", f.Name, a)
		case f.Kind == KindBool:
			use.ValueOffset = len(a)
		case eq:
			use.ValueOffset, use.Value = len(name)+1, val
		case i+1 < len(argv) && takesValue(argv[i+1]):
			i++
			use.ValueIndex, use.Value = i, argv[i]
		default:
			return nil, refuse(CodeInvalid, "%s expects one argument: the engine would refuse to start", name)
		}
		if strings.ContainsAny(use.Value, "$%") {
			return nil, refuse(CodeUnsupported, "%s is set indirectly (%q): change it where it is defined, or write a number in the unit", f.Name, use.Value)
		}
		out = append(out, use)
	}
	return out, nil
}

// FlagValue returns the value the unit gives f ("true" for a bool flag that
// is present), and whether it sets it at all: the last use wins, as in
// argparse.
func (eff *Effective) FlagValue(f EngineFlag) (string, bool, error) {
	uses, err := flagUses(eff.Argv(), eff.Detection, f)
	if err != nil || len(uses) == 0 {
		return "", false, err
	}
	if f.Kind == KindBool {
		return "true", true, nil
	}
	return strings.TrimSpace(uses[len(uses)-1].Value), true, nil
}

// SetFlag produces the smallest edit of the file holding the engine command
// that makes f's value value (as ParseValue returns it): every use of f gets
// the new value bytes in place (a bool flag set false: every use removed,
// with the separator before it); a flag the unit lacks is added after the
// last option, in the unit's style (continuation lines and indentation,
// --opt=value when the unit writes its options so). No other byte changes.
// A flag of the other engine, a value outside the flag's range, an
// abbreviated or indirect use are refused (*Error). The edit is verified
// by parsing it back: the argv changes only at f and reads back value, the
// speculative settings are unchanged.
func (eff *Effective) SetFlag(f EngineFlag, value string) (*Edit, error) {
	if f.Engine != eff.Detection.Engine {
		other := ""
		if f.Counterpart != "" {
			other = fmt.Sprintf(" (its counterpart is %s)", f.Counterpart)
		}
		return nil, refuse(CodeUnsupported, "%s is %s's; this unit runs %s%s", f.Name, engineName(f.Engine), engineName(eff.Detection.Engine), other)
	}
	canon, err := f.ParseValue(value)
	if err != nil {
		return nil, refuse(CodeOutOfRange, "%v", err)
	}
	cmd := &eff.Engine.Command
	argv := cmd.Argv()
	spec, err := readSpec(argv, eff.Detection)
	if err != nil {
		return nil, err
	}
	uses, err := flagUses(argv, eff.Detection, f)
	if err != nil {
		return nil, err
	}
	sp, ae, ch, err := planFlag(eff, f, canon, uses)
	if err != nil {
		return nil, err
	}
	e, neff, err := eff.apply(spec, sp, ae, ch)
	if err != nil {
		return nil, err
	}
	e.Label = f.Name + " " + canon
	got, set, err := neff.FlagValue(f)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: edited unit: %v", errInternal, err)
	case f.Kind == KindBool && set != (canon == "true"):
		return nil, fmt.Errorf("%w: edited unit reads back %s present %v, want %s", errInternal, f.Name, set, canon)
	case f.Kind != KindBool && (!set || !f.Same(got, canon)):
		return nil, fmt.Errorf("%w: edited unit reads back %s %q, want %s", errInternal, f.Name, got, canon)
	case e.SpecAfter.DraftSteps() != spec.DraftSteps() || e.SpecAfter.Present != spec.Present:
		return nil, fmt.Errorf("%w: edited unit's speculative settings changed", errInternal)
	}
	return e, nil
}

// planFlag plans f's value canon over its uses.
func planFlag(eff *Effective, f EngineFlag, canon string, uses []FlagUse) ([]splice, []argEdit, []Change, error) {
	cmd := &eff.Engine.Command
	var (
		sp []splice
		ae []argEdit
	)
	if f.Kind == KindBool {
		switch {
		case canon == "true" && len(uses) == 0:
			s, a, err := appendOption(eff, [2]string{f.Name, ""})
			if err != nil {
				return nil, nil, nil, err
			}
			return []splice{s}, []argEdit{a}, []Change{{Flag: f.Name, To: "true"}}, nil
		case canon == "false":
			for _, u := range uses {
				s, a := removeUse(cmd, u)
				sp, ae = append(sp, s), append(ae, a)
			}
			if len(uses) > 0 {
				return sp, ae, []Change{{Flag: f.Name, From: "true", To: "(removed)"}}, nil
			}
		}
		return nil, nil, nil, nil
	}
	if len(uses) == 0 {
		s, a, err := appendOption(eff, [2]string{f.Name, canon})
		if err != nil {
			return nil, nil, nil, err
		}
		return []splice{s}, []argEdit{a}, []Change{{Flag: f.Name, To: canon}}, nil
	}
	for _, u := range uses {
		if f.Same(u.Value, canon) {
			continue
		}
		s, a := replaceValue(cmd, u, canon)
		sp, ae = append(sp, s), append(ae, a)
	}
	if len(sp) == 0 {
		return nil, nil, nil, nil
	}
	return sp, ae, []Change{{Flag: f.Name, From: strings.TrimSpace(uses[len(uses)-1].Value), To: canon}}, nil
}

// appendOption adds one option after the engine command's last option (and
// its value), in the unit's style.
func appendOption(eff *Effective, opt [2]string) (splice, argEdit, error) {
	cmd := &eff.Engine.Command
	argv := cmd.Argv()
	if slices.Contains(argv[eff.Detection.ArgsStart:], "--") {
		return splice{}, argEdit{}, refuse(CodeUnsupported, "the engine command has a \"--\": opsbot does not add %s before or after it; add it by hand", opt[0])
	}
	last := len(argv) - 1
	name := last
	for k := last; k >= eff.Detection.ArgsStart; k-- {
		if strings.HasPrefix(argv[k], "-") {
			name = k
			break
		}
	}
	if name < last-1 {
		name = last // positionals after the last option: anchor on the last word
	}
	eq, spaced := 0, 0
	for k := eff.Detection.ArgsStart; k < len(argv); k++ {
		a := argv[k]
		if strings.HasPrefix(a, "--") && strings.Contains(a, "=") {
			eq++
		} else if strings.HasPrefix(a, "--") && k+1 < len(argv) && !strings.HasPrefix(argv[k+1], "-") {
			spaced++
		}
	}
	s, a := insertWords(eff.Engine.Unit, cmd, FlagUse{NameIndex: name, ValueIndex: last}, eq > spaced, [][2]string{opt})
	return s, a, nil
}

func engineName(e string) string {
	if e == VLLM {
		return "vLLM"
	}
	return "SGLang"
}
