package commands

import (
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// engineFlagArg is engine set's FLAG: an allowlisted engine flag
// (unit.EngineFlags), written without its dashes.
type engineFlagArg struct {
	required
	v *string
}

func (engineFlagArg) usage() string { return "FLAG" }
func (engineFlagArg) help() (string, string) {
	return "FLAG", "the engine flag, without its dashes: " + engineFlagList()
}
func (engineFlagArg) missing(path string) string {
	return path + " needs a FLAG: " + engineFlagNames()
}
func (a engineFlagArg) render(b *strings.Builder) { b.WriteByte(' '); b.WriteString(*a.v) }
func (a engineFlagArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if f, ok := unit.LookupFlag(w); ok {
		*a.v = f.Word()
		return i, "", ""
	}
	if s := cp.p.findService(w); s != nil {
		// `engine set qwen mem-fraction-static 0.8`: the service goes last.
		rest := make([]string, 0, len(toks))
		for j, t := range toks {
			if j != i {
				rest = append(rest, t.s)
			}
		}
		return i, fmt.Sprintf("%s is a service: the FLAG comes first, the service last", quote(w)),
			didYouMean(strings.Join(append(rest, s.Name), " "))
	}
	names := make([]string, len(unit.EngineFlags))
	for k, f := range unit.EngineFlags {
		names[k] = f.Word()
	}
	sugg := ""
	if m := closest(strings.ToLower(strings.TrimLeft(w, "-")), names); m != "" {
		sugg = didYouMean(replaceWord(toks, i, m))
	}
	return i, fmt.Sprintf("opsbot does not set %s: the engine flags it sets are %s", quote(w), engineFlagNames()), sugg
}

// engineValueArg is engine set's VALUE, checked as its flag's type and range.
type engineValueArg struct {
	required
	flag *string
	v    *string
}

func (engineValueArg) usage() string { return "VALUE" }
func (engineValueArg) help() (string, string) {
	return "VALUE", "the flag's value, checked as the engine checks it: a decimal for a share of memory (0.8), a whole number for a count, true or false for a switch"
}
func (engineValueArg) missing(path string) string {
	return path + " needs a VALUE after the FLAG"
}
func (a engineValueArg) render(b *strings.Builder) { b.WriteByte(' '); b.WriteString(*a.v) }
func (a engineValueArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	f, ok := unit.LookupFlag(*a.flag)
	if !ok {
		return i, "the VALUE comes after the FLAG", "for example `" + cp.spec.Examples[0] + "`"
	}
	v, err := f.ParseValue(toks[i].s)
	if err != nil {
		return i, err.Error(), ""
	}
	*a.v = v
	return i, "", ""
}

// engineFlagNames lists the allowlist's words: "mem-fraction-static, ...".
func engineFlagNames() string {
	names := make([]string, len(unit.EngineFlags))
	for i, f := range unit.EngineFlags {
		names[i] = f.Word()
	}
	return strings.Join(names, ", ")
}

// engineFlagList lists the allowlist with each flag's engine and range.
func engineFlagList() string {
	parts := make([]string, len(unit.EngineFlags))
	for i, f := range unit.EngineFlags {
		eng := "SGLang"
		if f.Engine == unit.VLLM {
			eng = "vLLM"
		}
		parts[i] = fmt.Sprintf("%s (%s, %s)", f.Word(), eng, f.Range())
	}
	return strings.Join(parts, "; ")
}

// isEngineFlag reports whether w, a dashed word, names an engine flag
// (`engine set --mem-fraction-static 0.8`: the dashes are not needed).
func isEngineFlag(b binding, w string) (string, bool) {
	for _, p := range b.params {
		if _, ok := p.(engineFlagArg); ok {
			if f, ok := unit.LookupFlag(w); ok {
				return f.Word(), true
			}
		}
	}
	return "", false
}
