package unit

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// DefaultMaxSteps is the largest step count accepted when Options.MaxSteps is 0:
// the one home of that limit: the config and the command language default to it.
const DefaultMaxSteps = 16

// Options tunes SetSteps.
type Options struct {
	// MaxSteps is the largest accepted N (0: DefaultMaxSteps). N must be >= 0:
	// 0 is speculative decoding off (every speculative option removed, with
	// no other option given; see planOff).
	MaxSteps int
	// DraftTokens sets SGLang's --speculative-num-draft-tokens explicitly when
	// topk > 1 (0: keep the unit's value). With topk 1 it must be 0 or N+1.
	DraftTokens int
	// TopK sets SGLang's --speculative-eagle-topk (0: keep the unit's value,
	// 1 when it has none). vLLM has no topk: a TopK above 1 is refused there.
	TopK int
	// AdaptiveConfig, for SGLang, turns per-load speculation on with the
	// adaptive config file at this path: --speculative-adaptive is added when
	// missing and --speculative-adaptive-config set to the path (replaced or
	// added). N must then be one of the file's candidate steps (the caller's
	// contract); SGLang runs it with EAGLE/EAGLE3 and topk 1 only. "" leaves
	// both flags as they are. Refused for vLLM.
	AdaptiveConfig string
	// AdaptiveDefault, for SGLang, turns per-load speculation on with
	// SGLang's own table (its DEFAULT_ADAPTIVE_CONFIG): --speculative-adaptive
	// is added when missing and every --speculative-adaptive-config goes. N
	// must be one of that table's candidates (1, 3, 5 or 7 start a first slot
	// at N). Not with AdaptiveConfig; refused for vLLM.
	AdaptiveDefault bool
	// BatchTable, for vLLM, is the JSON text of num_speculative_tokens_per_batch_size
	// to set inside --speculative-config (its value replaced byte-exactly, or the
	// key added before the closing brace); N, num_speculative_tokens, must be the
	// table's largest k (vLLM clamps each k to it). "" leaves it as it is.
	// Refused for SGLang.
	BatchTable string
	// MaxRunningRequests, for SGLang, adds --max-running-requests N after
	// the speculative options (in the unit's style) when the command line
	// does not set it: SGLang caps the running requests at 48 with
	// speculation on unless it is set. A command line that already sets it
	// (the option or an abbreviation of it) keeps its value. 0 adds nothing.
	// Refused for vLLM.
	MaxRunningRequests int
	// SkipZeroDraftExtend, for SGLang with AdaptiveConfig, sets SGLang's
	// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND: unless the unit already sets
	// it true, the line "Environment=SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1"
	// is inserted right above the engine's ExecStart= (same file, same
	// section). Any other SGLang edit with N above 0 removes that exact line
	// from the engine's file; other lines stay as written (with an adaptive
	// table, one that still sets the switch is refused).
	SkipZeroDraftExtend bool
}

// FlagMaxRunning is SGLang's --max-running-requests.
const FlagMaxRunning = "--max-running-requests"

// setsOption reports whether argv sets the option full (or an abbreviation of
// it argparse would take: a prefix of it at least as long as min), as
// "--opt V" or "--opt=V".
func setsOption(argv []string, full string, min int) bool {
	for _, a := range argv {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(a, "=")
		if len(name) >= min && strings.HasPrefix(full, name) {
			return true
		}
	}
	return false
}

// safePath is a path that needs no quoting in a unit's command line nor in a shell.
func safePath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@", r)) {
			return false
		}
	}
	return true
}

// Change is one setting the edit changes. From is "" when the option is added.
type Change struct {
	Flag string `json:"flag"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Edit is the result of SetSteps: the file's text before and after, and the
// engine argv before and after. When Changed is empty the unit already had the
// requested settings and After == Before.
type Edit struct {
	File       string // Unit.Name of the file edited (main unit or drop-in)
	Engine     string
	Steps      int
	Before     string
	After      string
	ArgvBefore []string
	ArgvAfter  []string
	SpecBefore Spec
	SpecAfter  Spec
	Changed    []Change
	Diff       string // unified diff of Before -> After ("" when unchanged)
	// Label says what the edit sets when it is not the speculative steps
	// (SetFlag: "--mem-fraction-static 0.8"); a drop-in's header names it.
	Label string
	// Replacements are the byte ranges of Before replaced to make After, in
	// order and not overlapping (an empty Span is an insertion). Every byte
	// outside them is unchanged.
	Replacements []Replacement

	execAfter []string // the effective ExecStart= values after the edit, as written
}

// SetSteps parses text as one unit file (no drop-ins) and sets the engine's
// speculative steps to n. See (*Effective).SetSteps.
func SetSteps(text string, n int, opts Options) (*Edit, error) {
	u, err := Parse("", text)
	if err != nil {
		return nil, fmt.Errorf("parse unit: %w", err)
	}
	eff, err := Merge(u)
	if err != nil {
		return nil, err
	}
	return eff.SetSteps(n, opts)
}

// Replacement replaces Span of a file's text with Text.
type Replacement struct {
	Span
	Text string
}

type splice = Replacement

// argEdit is the same change seen on argv.
type argEdit struct {
	index  int // argv index
	vi, vj int // byte range of the value replaced (replace) ...
	text   string
	insert []string // ... or words inserted before index (when non-nil)
	del    int      // ... or this many words deleted from index (when > 0)
}

// SetSteps produces the smallest edit of the file holding the engine command
// that sets its speculative steps to n:
//   - SGLang: --speculative-num-steps N; --speculative-eagle-topk kept (added as
//     1 when missing); --speculative-num-draft-tokens N+1 when topk is 1, kept
//     (or Options.DraftTokens) and checked against the draft tree size when
//     topk > 1. Missing options are added after the last speculative option in
//     the same style (continuation lines and indentation, --flag=value).
//     Abbreviated option names and the =value form stay as written.
//   - vLLM: num_speculative_tokens inside --speculative-config's JSON (value
//     bytes replaced in place; every other key and the quoting untouched).
//
// Refusals (*Error): CodeNoSpeculation (no speculative decoding configured:
// the editor never invents it), CodeOutOfRange, CodeRejected (the engine would
// refuse the result), CodeUnsupported, CodeInvalid. The edit is verified by
// parsing the result back: the argv changes only at the speculative options and
// reads back n; a failed check returns an error instead of text.
func (eff *Effective) SetSteps(n int, opts Options) (*Edit, error) {
	maxSteps := opts.MaxSteps
	if maxSteps <= 0 {
		maxSteps = DefaultMaxSteps
	}
	if n < 0 || n > maxSteps {
		return nil, refuse(CodeOutOfRange, "speculative steps %d out of range: use 0..%d (0: speculative decoding off)", n, maxSteps)
	}
	cmd := &eff.Engine.Command
	argv := cmd.Argv()
	spec, err := readSpec(argv, eff.Detection)
	if err != nil {
		return nil, err
	}
	var (
		splices []splice
		aedits  []argEdit
		changes []Change
	)
	switch {
	case n == 0:
		splices, aedits, changes, err = planOff(eff, spec, opts)
	case eff.Detection.Engine == SGLang:
		splices, aedits, changes, err = planSGLang(eff, spec, n, opts)
	default:
		splices, aedits, changes, err = planVLLM(eff, spec, n, opts)
	}
	if err != nil {
		return nil, err
	}
	if n > 0 && eff.Detection.Engine == SGLang {
		sp, ch := eff.skipZeroSplices(opts.AdaptiveConfig != "" && opts.SkipZeroDraftExtend)
		splices = append(splices, sp...)
		changes = append(changes, ch...)
	}
	e, _, err := eff.apply(spec, splices, aedits, changes)
	if err != nil {
		return nil, err
	}
	e.Steps = n
	if err := readsBack(e.SpecAfter, n, opts); err != nil {
		return nil, err
	}
	return e, nil
}

// apply makes the edit of the engine's file from its splices and the same
// change seen on argv, and verifies it by parsing the result back: the
// merged unit's argv must be the one the argv edits make. It returns the
// edit (Steps: the speculative steps after) and the unit after it.
func (eff *Effective) apply(spec Spec, splices []splice, aedits []argEdit, changes []Change) (*Edit, *Effective, error) {
	argv := eff.Engine.Command.Argv()
	u := eff.Engine.Unit
	after := applySplices(u.Text, splices)
	for i := 1; i < len(splices); i++ {
		if splices[i].Start < splices[i-1].End {
			return nil, nil, fmt.Errorf("%w: overlapping edits", errInternal)
		}
	}
	wantArgv := applyArgEdits(argv, aedits)

	e := &Edit{
		File: u.Name, Engine: eff.Detection.Engine,
		Before: u.Text, After: after,
		ArgvBefore: argv, SpecBefore: spec, Changed: changes,
		Replacements: splices,
	}
	// Verify by parsing the result back.
	nu, err := Parse(u.Name, after)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: edited unit does not parse: %v", errInternal, err)
	}
	files := slices.Clone(eff.files)
	for i := range files {
		if files[i] == u {
			files[i] = nu
		}
	}
	neff, err := Merge(files[0], files[1:]...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: edited unit: %v", errInternal, err)
	}
	e.ArgvAfter = neff.Argv()
	if !slices.Equal(e.ArgvAfter, wantArgv) {
		return nil, nil, fmt.Errorf("%w: edited argv %q, want %q", errInternal, e.ArgvAfter, wantArgv)
	}
	if e.SpecAfter, err = neff.Spec(); err != nil {
		return nil, nil, fmt.Errorf("%w: edited settings: %v", errInternal, err)
	}
	e.Steps = e.SpecAfter.DraftSteps()
	seen := map[*Entry]bool{}
	for _, l := range neff.Commands {
		if !seen[l.Entry] {
			seen[l.Entry] = true
			e.execAfter = append(e.execAfter, l.Unit.Text[l.Entry.ValueSpan.Start:l.Entry.ValueSpan.End])
		}
	}
	if after != u.Text {
		e.Diff = UnifiedDiff(nameOrDefault(u.Name, "unit"), u.Text, after)
	}
	return e, neff, nil
}

// readsBack checks that the edited unit's settings are what was asked: n
// steps (0: no speculative option left), and the per-load form opts names.
func readsBack(sp Spec, n int, opts Options) error {
	switch {
	case sp.DraftSteps() != n || (n == 0 && (sp.Present || len(sp.Uses) > 0)):
		return fmt.Errorf("%w: edited unit reads back steps %d (speculation %v), want %d", errInternal, sp.DraftSteps(), sp.Present, n)
	case opts.AdaptiveDefault && (!sp.Adaptive || sp.AdaptiveConfig != ""):
		return fmt.Errorf("%w: edited unit reads back adaptive %v config %q, want SGLang's default table", errInternal, sp.Adaptive, sp.AdaptiveConfig)
	case opts.AdaptiveConfig != "" && (!sp.Adaptive || sp.AdaptiveConfig != opts.AdaptiveConfig):
		return fmt.Errorf("%w: edited unit reads back adaptive %v config %q, want %q", errInternal, sp.Adaptive, sp.AdaptiveConfig, opts.AdaptiveConfig)
	case (opts.AdaptiveConfig != "" || opts.AdaptiveDefault) && sp.SkipZeroDraftExtend != (opts.AdaptiveConfig != "" && opts.SkipZeroDraftExtend):
		return refuse(CodeRejected, "the unit sets %s elsewhere than the line opsbot writes above ExecStart=, and this change wants it %v: "+
			"remove that assignment by hand", EnvSkipZeroDraftExtend, !sp.SkipZeroDraftExtend)
	case opts.BatchTable != "" && sp.BatchTable != opts.BatchTable:
		return fmt.Errorf("%w: edited unit reads back the per-batch table %s, want %s", errInternal, sp.BatchTable, opts.BatchTable)
	}
	return nil
}

func nameOrDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func applySplices(text string, sp []splice) string {
	sort.SliceStable(sp, func(i, j int) bool { return sp[i].Start < sp[j].Start })
	var b strings.Builder
	last := 0
	for _, s := range sp {
		b.WriteString(text[last:s.Start])
		b.WriteString(s.Text)
		last = s.End
	}
	b.WriteString(text[last:])
	return b.String()
}

func applyArgEdits(argv []string, ed []argEdit) []string {
	out := slices.Clone(argv)
	// Replacements first (indices refer to the original argv), from the back so that
	// two in one word keep their offsets, then inserts from the back.
	// (Two insertions at one offset: the later one first, so they read in order.)
	repl := slices.Clone(ed)
	slices.Reverse(repl)
	sort.SliceStable(repl, func(i, j int) bool {
		if repl[i].index != repl[j].index {
			return repl[i].index > repl[j].index
		}
		return repl[i].vi > repl[j].vi
	})
	for _, a := range repl {
		if a.insert == nil && a.del == 0 {
			v := out[a.index]
			out[a.index] = v[:a.vi] + a.text + v[a.vj:]
		}
	}
	sort.SliceStable(ed, func(i, j int) bool { return ed[i].index > ed[j].index })
	for _, a := range ed {
		switch {
		case a.insert != nil:
			out = slices.Insert(out, a.index, a.insert...)
		case a.del > 0:
			out = slices.Delete(out, a.index, a.index+a.del)
		}
	}
	return out
}

// numberRange returns the byte range of the number in value[from:] (spaces trimmed).
func numberRange(v string, from int) (int, int) {
	i, j := from, len(v)
	for i < j && isWS(v[i]) {
		i++
	}
	for j > i && isWS(v[j-1]) {
		j--
	}
	return i, j
}

// replaceValue builds the splice and argv edit that set use's value to text.
func replaceValue(cmd *Command, use FlagUse, text string) (splice, argEdit) {
	arg := &cmd.Args[use.ValueIndex]
	i, j := numberRange(arg.Value, use.ValueOffset)
	return splice{arg.ValueSpan(i, j), text}, argEdit{index: use.ValueIndex, vi: i, vj: j, text: text}
}

// insertAfter builds the splice and argv edit that add options after the
// option use (its value), in the style of the surrounding command line.
func insertAfter(u *Unit, cmd *Command, use FlagUse, opts [][2]string) (splice, argEdit) {
	return insertWords(u, cmd, use, use.Eq(), opts)
}

// insertWords is insertAfter writing each option with a value as
// --opt=value when eq, else as --opt value.
func insertWords(u *Unit, cmd *Command, use FlagUse, eq bool, opts [][2]string) (splice, argEdit) {
	text := u.Text
	valArg := cmd.Args[use.ValueIndex]
	nameArg := cmd.Args[use.NameIndex]
	prevEnd := cmd.PathWord.Span.End
	if use.NameIndex > 0 {
		prevEnd = cmd.Args[use.NameIndex-1].Span.End
	}
	sep := " "
	lineStart := strings.LastIndexAny(text[:nameArg.Span.Start], "\n\r") + 1
	if gap := text[prevEnd:nameArg.Span.Start]; lineStart > prevEnd && strings.Contains(gap, "\\") &&
		strings.Trim(text[lineStart:nameArg.Span.Start], " \t") == "" {
		// One option per continuation line: copy "<space>\<newline>" and the indentation.
		nl := strings.IndexAny(gap, "\n\r")
		if gap[nl] == '\r' && nl+1 < len(gap) && gap[nl+1] == '\n' {
			nl++
		}
		sep = gap[:nl+1] + text[lineStart:nameArg.Span.Start]
	}
	var b strings.Builder
	var words []string
	for _, o := range opts {
		b.WriteString(sep)
		if o[1] == "" { // a store_true flag
			b.WriteString(o[0])
			words = append(words, o[0])
			continue
		}
		if eq {
			b.WriteString(o[0] + "=" + o[1])
			words = append(words, o[0]+"="+o[1])
		} else {
			b.WriteString(o[0] + " " + o[1])
			words = append(words, o[0], o[1])
		}
	}
	at := valArg.Span.End
	return splice{Span{at, at}, b.String()}, argEdit{index: use.ValueIndex + 1, insert: words}
}

// removeUse builds the splice and argv edit that delete the option use (with
// its value) and the separator before it (a space, or a line continuation
// and its indentation).
func removeUse(cmd *Command, use FlagUse) (splice, argEdit) {
	prevEnd := cmd.PathWord.Span.End
	if use.NameIndex > 0 {
		prevEnd = cmd.Args[use.NameIndex-1].Span.End
	}
	end := cmd.Args[use.ValueIndex].Span.End
	return splice{Span{prevEnd, end}, ""}, argEdit{index: use.NameIndex, del: use.ValueIndex - use.NameIndex + 1}
}

func lastUse(s Spec, flags ...string) (FlagUse, bool) {
	for i := len(s.Uses) - 1; i >= 0; i-- {
		if len(flags) == 0 || slices.Contains(flags, s.Uses[i].Flag) {
			return s.Uses[i], true
		}
	}
	return FlagUse{}, false
}

func usesOf(s Spec, flag string) []FlagUse {
	var out []FlagUse
	for _, u := range s.Uses {
		if u.Flag == flag {
			out = append(out, u)
		}
	}
	return out
}

// planSGLang plans SGLang's speculative options for n steps with opts: the
// steps, the topk (1 when the unit sets none) and the draft token count
// they imply; for a per-load table the adaptive options and, when opts asks,
// the running-request cap; for a single setting the adaptive options go. A
// setting SGLang would reject, crash on or quietly ignore is refused.
func planSGLang(eff *Effective, spec Spec, n int, opts Options) ([]splice, []argEdit, []Change, error) {
	if !spec.Present {
		return nil, nil, nil, refuse(CodeNoSpeculation, "refusing to invent speculative decoding: the unit has no --speculative-algorithm")
	}
	switch spec.CanonicalAlgorithm() {
	case "NGRAM", "LOOKAHEAD":
		return nil, nil, nil, refuse(CodeUnsupported, "speculative algorithm %s has no draft-model steps to set", spec.Algorithm)
	}
	topk, draft, addTopK, err := sglangDraft(spec, n, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkSGLangOptions(spec, topk, opts); err != nil {
		return nil, nil, nil, err
	}
	e := &sglangEdit{cmd: &eff.Engine.Command, spec: spec}
	if e.set(FlagSteps, n) {
		e.add = append(e.add, [2]string{FlagSteps, strconv.Itoa(n)})
	}
	if addTopK {
		e.add = append(e.add, [2]string{FlagTopK, strconv.Itoa(topk)})
	} else if opts.TopK > 0 {
		e.set(FlagTopK, topk)
	}
	if e.set(FlagDraftTokens, draft) {
		e.add = append(e.add, [2]string{FlagDraftTokens, strconv.Itoa(draft)})
	}
	switch {
	case opts.AdaptiveConfig != "":
		e.setAdaptive(opts.AdaptiveConfig)
	case opts.AdaptiveDefault:
		e.setAdaptiveDefault()
	case spec.Adaptive || spec.AdaptiveConfig != "":
		e.removeAdaptive() // a single setting: the unit no longer runs per load
	}
	if opts.MaxRunningRequests > 0 && !setsOption(e.cmd.Argv(), FlagMaxRunning, len("--max-running")) {
		e.add = append(e.add, [2]string{FlagMaxRunning, strconv.Itoa(opts.MaxRunningRequests)})
	}
	e.insertAdded(eff.Engine.Unit)
	return e.sp, e.ae, e.ch, nil
}

// sglangDraft is the topk and the draft token count SGLang runs n steps
// with: the unit's topk (1 when it sets none, addTopK then true) unless
// opts gives one; with topk 1 the draft tokens are n+1, as SGLang forces;
// with a larger topk the unit's count unless opts gives one, which must fit
// the draft tree. What does not fit is refused.
func sglangDraft(spec Spec, n int, opts Options) (topk, draft int, addTopK bool, err error) {
	topk = spec.TopK
	addTopK = len(usesOf(spec, FlagTopK)) == 0
	if addTopK {
		topk = 1
	}
	if opts.TopK > 0 {
		topk = opts.TopK
	}
	if topk < 1 {
		return 0, 0, false, refuse(CodeRejected, "--speculative-eagle-topk is %d: it must be at least 1", topk)
	}
	if topk == 1 {
		if opts.DraftTokens != 0 && opts.DraftTokens != n+1 {
			return 0, 0, false, refuse(CodeRejected, "with --speculative-eagle-topk 1 SGLang forces --speculative-num-draft-tokens to steps+1 = %d; %d is not possible", n+1, opts.DraftTokens)
		}
		return topk, n + 1, addTopK, nil
	}
	draft = spec.DraftTokens
	if opts.DraftTokens > 0 {
		draft = opts.DraftTokens
	}
	if draft == 0 {
		return 0, 0, false, refuse(CodeRejected, "--speculative-eagle-topk is %d but --speculative-num-draft-tokens is not set: SGLang would crash at start; give the draft token count explicitly", topk)
	}
	// The draft tree has topk nodes at the first step and topk*topk
	// candidates at each further step; SGLang picks draft-1 of them plus the root.
	limit := topk + (n-1)*topk*topk + 1
	if draft < 2 || draft > limit {
		return 0, 0, false, refuse(CodeRejected, "--speculative-num-draft-tokens %d does not fit a draft tree of %d steps with topk %d: it must be between 2 and %d", draft, n, topk, limit)
	}
	return topk, draft, addTopK, nil
}

// checkSGLangOptions refuses the options of opts SGLang does not take, or
// takes and then ignores: vLLM's per-batch table, a negative running-request
// cap, and an adaptive config for an algorithm other than EAGLE or EAGLE3
// (NEXTN is EAGLE to SGLang), for a topk above 1, or at an odd path.
func checkSGLangOptions(spec Spec, topk int, opts Options) error {
	if opts.BatchTable != "" {
		return refuse(CodeUnsupported, "a per-batch-size table is vLLM's; SGLang takes an adaptive config file")
	}
	if opts.MaxRunningRequests < 0 {
		return refuse(CodeOutOfRange, "%s %d: it must be at least 1", FlagMaxRunning, opts.MaxRunningRequests)
	}
	if opts.AdaptiveConfig != "" && opts.AdaptiveDefault {
		return refuse(CodeInvalid, "an adaptive config file and SGLang's default table are two tables: give one")
	}
	if opts.AdaptiveConfig == "" && !opts.AdaptiveDefault {
		return nil
	}
	switch {
	case spec.CanonicalAlgorithm() != "EAGLE" && spec.CanonicalAlgorithm() != "EAGLE3":
		return refuse(CodeUnsupported, "SGLang runs per-load speculation with EAGLE, EAGLE3 or NEXTN only, not %s: it would fall back to static steps", spec.Algorithm)
	case topk != 1:
		return refuse(CodeRejected, "SGLang runs per-load speculation with --speculative-eagle-topk 1 only (the unit has %d): it would fall back to static steps", topk)
	case opts.AdaptiveConfig != "" && !safePath(opts.AdaptiveConfig):
		return refuse(CodeInvalid, "adaptive config path %q: use an absolute path of letters, digits and /._-+@ only", opts.AdaptiveConfig)
	}
	return nil
}

// sglangEdit gathers an SGLang unit edit: the splices of the unit's text,
// the matching argv edits and the changes, in order, and the options to
// add after the last speculative one (name and value; "" for a flag).
type sglangEdit struct {
	cmd  *Command
	spec Spec
	sp   []splice
	ae   []argEdit
	ch   []Change
	add  [][2]string
}

// set gives every use of flag the value want (one change, from its last
// use's value, when some use had another); missing is true when the unit
// does not use flag, and then nothing is done.
func (e *sglangEdit) set(flag string, want int) (missing bool) {
	uses := usesOf(e.spec, flag)
	if len(uses) == 0 {
		return true
	}
	old := uses[len(uses)-1]
	changed := false
	for _, use := range uses {
		cur, err := pyInt(use)
		if err == nil && cur == want {
			continue
		}
		s, a := replaceValue(e.cmd, use, strconv.Itoa(want))
		e.sp, e.ae = append(e.sp, s), append(e.ae, a)
		changed = true
	}
	if changed {
		e.ch = append(e.ch, Change{Flag: flag, From: strings.TrimSpace(old.Value), To: strconv.Itoa(want)})
	}
	return false
}

// removeAdaptive removes every use of the adaptive options.
func (e *sglangEdit) removeAdaptive() {
	for _, use := range e.spec.Uses {
		if use.Flag == FlagAdaptive || use.Flag == FlagAdaptiveConfig {
			s, a := removeUse(e.cmd, use)
			e.sp, e.ae = append(e.sp, s), append(e.ae, a)
			e.ch = append(e.ch, Change{Flag: use.Flag, From: use.Value, To: "(removed)"})
		}
	}
}

// setAdaptiveDefault turns adaptive speculation on with SGLang's own table:
// the flag added when the unit lacks it, every config path removed.
func (e *sglangEdit) setAdaptiveDefault() {
	if !e.spec.Adaptive {
		e.add = append(e.add, [2]string{FlagAdaptive, ""})
	}
	for _, use := range e.spec.Uses {
		if use.Flag == FlagAdaptiveConfig {
			s, a := removeUse(e.cmd, use)
			e.sp, e.ae = append(e.sp, s), append(e.ae, a)
			e.ch = append(e.ch, Change{Flag: use.Flag, From: use.Value, To: "(removed)"})
		}
	}
}

// setAdaptive turns adaptive speculation on with its config at path: the
// flag added when the unit lacks it, the config's path set in every use of
// its option or added when there is none.
func (e *sglangEdit) setAdaptive(path string) {
	if !e.spec.Adaptive {
		e.add = append(e.add, [2]string{FlagAdaptive, ""})
	}
	uses := usesOf(e.spec, FlagAdaptiveConfig)
	if len(uses) == 0 {
		e.add = append(e.add, [2]string{FlagAdaptiveConfig, path})
	}
	changed := false
	for _, use := range uses {
		if use.Value == path {
			continue
		}
		arg := &e.cmd.Args[use.ValueIndex]
		i, j := use.ValueOffset, len(arg.Value)
		e.sp = append(e.sp, splice{arg.ValueSpan(i, j), path})
		e.ae = append(e.ae, argEdit{index: use.ValueIndex, vi: i, vj: j, text: path})
		changed = true
	}
	if changed {
		e.ch = append(e.ch, Change{Flag: FlagAdaptiveConfig, From: uses[len(uses)-1].Value, To: path})
	}
}

// insertAdded inserts the options to add after the last speculative one of
// the unit u, each a change.
func (e *sglangEdit) insertAdded(u *Unit) {
	if len(e.add) == 0 {
		return
	}
	last, _ := lastUse(e.spec)
	s, a := insertAfter(u, e.cmd, last, e.add)
	e.sp, e.ae = append(e.sp, s), append(e.ae, a)
	for _, o := range e.add {
		e.ch = append(e.ch, Change{Flag: o[0], To: o[1]})
	}
}

func planVLLM(eff *Effective, spec Spec, n int, opts Options) ([]splice, []argEdit, []Change, error) {
	if opts.MaxRunningRequests != 0 {
		return nil, nil, nil, refuse(CodeUnsupported, "%s is SGLang's; vLLM's counterpart is --max-num-seqs", FlagMaxRunning)
	}
	sp, ae, ch, err := planVLLMSteps(eff, spec, n, opts)
	if err != nil {
		return sp, ae, ch, err
	}
	if opts.BatchTable == "" {
		if spec.BatchTable == "" {
			return sp, ae, ch, nil
		}
		// A single setting: take the per-batch table out of the JSON.
		use, _ := lastUse(spec, FlagSpecConfig)
		cmd := &eff.Engine.Command
		arg := &cmd.Args[use.ValueIndex]
		js := arg.Value[use.ValueOffset:]
		i, j, ok := jsonKeySpan(js, keyBatchTable)
		if !ok {
			return nil, nil, nil, refuse(CodeInvalid, "--speculative-config: cannot locate %s to remove it", keyBatchTable)
		}
		i, j = use.ValueOffset+i, use.ValueOffset+j
		sp = append(sp, splice{arg.ValueSpan(i, j), ""})
		ae = append(ae, argEdit{index: use.ValueIndex, vi: i, vj: j, text: ""})
		return sp, ae, append(ch, Change{Flag: changeJSONTable, From: spec.BatchTable, To: "(removed)"}), nil
	}
	if usesOf(spec, FlagNumSpecTokens) != nil {
		return nil, nil, nil, refuse(CodeUnsupported, "a per-batch-size table needs --speculative-config (the unit uses the older --num-speculative-tokens)")
	}
	use, ok := lastUse(spec, FlagSpecConfig)
	if !ok {
		return nil, nil, nil, refuse(CodeUnsupported, "a per-batch-size table needs --speculative-config")
	}
	cmd := &eff.Engine.Command
	arg := &cmd.Args[use.ValueIndex]
	js := arg.Value[use.ValueOffset:]
	vs, ve, cb, found, err := jsonKeyValue(js, keyBatchTable)
	if err != nil {
		return nil, nil, nil, refuse(CodeInvalid, "--speculative-config is not a JSON object: %v", err)
	}
	if found {
		if js[vs:ve] == opts.BatchTable {
			return sp, ae, ch, nil
		}
		i, j := use.ValueOffset+vs, use.ValueOffset+ve
		src := arg.src[i]
		sp = append(sp, splice{arg.ValueSpan(i, j), escapeFor(opts.BatchTable, src.quote)})
		ae = append(ae, argEdit{index: use.ValueIndex, vi: i, vj: j, text: opts.BatchTable})
		return sp, ae, append(ch, Change{Flag: changeJSONTable, From: js[vs:ve], To: opts.BatchTable}), nil
	}
	colon, comma := ":", ","
	if strings.Contains(js, "\": ") {
		colon = ": "
	}
	if strings.Contains(js, ", \"") || colon == ": " {
		comma = ", "
	}
	ins := comma + `"` + keyBatchTable + `"` + colon + opts.BatchTable
	at := use.ValueOffset + cb
	src := arg.src[at]
	sp = append(sp, splice{Span{src.start, src.start}, escapeFor(ins, src.quote)})
	ae = append(ae, argEdit{index: use.ValueIndex, vi: at, vj: at, text: ins})
	return sp, ae, append(ch, Change{Flag: changeJSONTable, To: opts.BatchTable}), nil
}

func planVLLMSteps(eff *Effective, spec Spec, n int, opts Options) ([]splice, []argEdit, []Change, error) {
	if opts.AdaptiveConfig != "" || opts.AdaptiveDefault {
		return nil, nil, nil, refuse(CodeUnsupported, "an adaptive config file is SGLang's; vLLM takes a per-batch-size table inside --speculative-config")
	}
	if opts.TopK > 1 || opts.DraftTokens > 0 {
		return nil, nil, nil, refuse(CodeUnsupported, "vLLM's speculative config has no topk or draft token count to set: only the steps (num_speculative_tokens)")
	}
	if !spec.Present {
		return nil, nil, nil, refuse(CodeNoSpeculation, "refusing to invent speculative decoding: the unit has no --speculative-config")
	}
	cmd := &eff.Engine.Command
	want := strconv.Itoa(n)
	var (
		sp []splice
		ae []argEdit
		ch []Change
	)
	// Legacy --num-speculative-tokens (vLLM < 0.8.5) wins when present.
	if uses := usesOf(spec, FlagNumSpecTokens); len(uses) > 0 {
		for _, use := range uses {
			if cur, err := pyInt(use); err == nil && cur == n {
				continue
			}
			s, a := replaceValue(cmd, use, want)
			sp, ae = append(sp, s), append(ae, a)
		}
		if len(sp) > 0 {
			ch = append(ch, Change{Flag: FlagNumSpecTokens, From: strings.TrimSpace(uses[len(uses)-1].Value), To: want})
		}
		return sp, ae, ch, nil
	}
	use, ok := lastUse(spec, FlagSpecConfig)
	if !ok { // legacy --speculative-model without a token count
		last, _ := lastUse(spec)
		s, a := insertAfter(eff.Engine.Unit, cmd, last, [][2]string{{FlagNumSpecTokens, want}})
		return []splice{s}, []argEdit{a}, []Change{{Flag: FlagNumSpecTokens, To: want}}, nil
	}
	arg := &cmd.Args[use.ValueIndex]
	js := arg.Value[use.ValueOffset:]
	vs, ve, cb, found, err := jsonKeyValue(js, keyNumSpecTokens)
	if err != nil {
		return nil, nil, nil, refuse(CodeInvalid, "--speculative-config is not a JSON object: %v", err)
	}
	if found {
		if spec.NumSpeculativeTokens == n {
			return nil, nil, nil, nil
		}
		i, j := use.ValueOffset+vs, use.ValueOffset+ve
		sp = append(sp, splice{arg.ValueSpan(i, j), want})
		ae = append(ae, argEdit{index: use.ValueIndex, vi: i, vj: j, text: want})
		ch = append(ch, Change{Flag: changeJSONSpecToks, From: js[vs:ve], To: want})
		return sp, ae, ch, nil
	}
	// Add the key before the closing brace, in the object's spacing style.
	colon, comma := ":", ","
	if strings.Contains(js, "\": ") {
		colon = ": "
	}
	if strings.Contains(js, ", \"") || colon == ": " {
		comma = ", "
	}
	ins := comma + `"` + keyNumSpecTokens + `"` + colon + want
	at := use.ValueOffset + cb
	src := arg.src[at]
	sp = append(sp, splice{Span{src.start, src.start}, escapeFor(ins, src.quote)})
	ae = append(ae, argEdit{index: use.ValueIndex, vi: at, vj: at, text: ins})
	ch = append(ch, Change{Flag: changeJSONSpecToks, To: want})
	return sp, ae, ch, nil
}
