package unit

import (
	"slices"
	"strings"
)

// Steps 0 is speculative decoding off: the edit takes every speculative
// option out of the engine's command line, each with its value and the
// separator before it (a space, or a line continuation and its
// indentation), and changes no other byte. Putting them back is `mtp undo`'s
// (the text before) or, within one job, planning from the unit the job found.
//
// SGLang: every --speculative-* option (the algorithm, steps, topk, draft
// tokens, the draft model, the adaptive flags, ...), abbreviations
// included; an abbreviation ambiguous between options that each take a
// value (`--speculative-draft` before SGLang added more draft options) goes
// with its value. An option of that family opsbot does not know (a newer
// algorithm's) is refused: whether it takes a value is unknown, and steps 0
// must not leave half a configuration behind. --max-running-requests stays:
// it is not speculative (SGLang's cap of 48 goes with the speculation).
//
// vLLM: --speculative-config (with its JSON) and the older
// --speculative-model and --num-speculative-tokens.

// planOff plans steps 0 on eff: the splices and argv edits that remove the
// speculative options, and one change per option removed. A unit without
// speculation needs nothing.
func planOff(eff *Effective, spec Spec, opts Options) ([]splice, []argEdit, []Change, error) {
	if opts.TopK != 0 || opts.DraftTokens != 0 || opts.AdaptiveConfig != "" || opts.AdaptiveDefault || opts.BatchTable != "" || opts.MaxRunningRequests != 0 {
		return nil, nil, nil, refuse(CodeRejected, "steps 0 is speculative decoding off: it takes no topk, draft tokens, adaptive config, per-batch table or running-request cap")
	}
	cmd := &eff.Engine.Command
	argv := cmd.Argv()
	var uses []FlagUse
	var err error
	if eff.Detection.Engine == VLLM {
		uses = spec.Uses
	} else if uses, err = sglangSpeculative(argv, eff.Detection.ArgsStart); err != nil {
		return nil, nil, nil, err
	}
	var (
		sp []splice
		ae []argEdit
		ch []Change
	)
	for _, use := range uses {
		s, a := removeUse(cmd, use)
		sp, ae = append(sp, s), append(ae, a)
		ch = append(ch, Change{Flag: use.Flag, From: use.Value, To: "(removed)"})
	}
	return sp, ae, ch, nil
}

// sglangSpeculative finds every --speculative-* option of an SGLang argv
// (from start, up to a "--"), as argparse would read it: the word, and the
// next one when the option takes a value and is not written --opt=value.
func sglangSpeculative(argv []string, start int) ([]FlagUse, error) {
	var out []FlagUse
	for i := start; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			break
		}
		name, _, eq := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "--speculative") {
			continue
		}
		canon, cands := resolveOption(name, sglangOptions)
		flag := canon
		switch {
		case canon == FlagAdaptive:
			out = append(out, FlagUse{Flag: canon, Written: name, NameIndex: i, ValueIndex: i, ValueOffset: len(a)})
			continue
		case canon == "" && len(cands) == 0:
			return nil, refuse(CodeUnsupported, "%s is a speculative option opsbot does not know: steps 0 (speculation off) removes only the options it knows; take it out by hand, or keep speculation on", name)
		case canon == "" && slices.Contains(cands, FlagAdaptive):
			return nil, refuse(CodeInvalid, "ambiguous option %s could match %s: SGLang refuses to start; write the full option name", name, strings.Join(cands, ", "))
		case canon == "":
			flag = name // ambiguous between options that each take one value
		}
		if eq {
			out = append(out, FlagUse{Flag: flag, Written: name, NameIndex: i, ValueIndex: i, ValueOffset: len(name) + 1, Value: a[len(name)+1:]})
			continue
		}
		if i+1 >= len(argv) || !takesValue(argv[i+1]) {
			return nil, refuse(CodeInvalid, "%s expects one argument: the engine would refuse to start", name)
		}
		out = append(out, FlagUse{Flag: flag, Written: name, NameIndex: i, ValueIndex: i + 1, Value: argv[i+1]})
		i++
	}
	return out, nil
}
