package commands

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse parses one command typed in chat or a terminal and validates it against
// opts. The text is normalised first (see normalize: smart quotes, dashes,
// odd spaces, a leading / or !); command words, keys, flags and names are
// case-insensitive. Names are resolved: a missing SERVICE becomes the
// default or the only configured service, and the host is filled from the
// service.
//
// Any invalid input, including anything that looks like a shell line
// (`;`, `|`, `&&`, `$(...)`, backticks, a second line), returns a *UsageError;
// nothing else is ever returned as an error. On success Parse(Text(c), opts)
// returns an equal Command. Parse is safe for concurrent use and does no I/O.
func Parse(text string, opts Options) (Command, error) {
	if len(text) > MaxInputLen {
		return nil, usageErr(nil, fmt.Sprintf("the command is too long (%d bytes, at most %d)", len(text), MaxInputLen), "")
	}
	s := normalize(text)
	if s == "" {
		return nil, usageErr(nil, "empty command", "`help` lists the commands")
	}
	var arr [maxTokens]token
	p := parser{opts: opts}
	toks := p.lx.lex(s, arr[:])
	c, err := p.parse(toks, false)
	if err != nil {
		return nil, err
	}
	return c, nil
}

type parser struct {
	opts Options
	lx   lexer
}

// cmdParse is the state of parsing one command (schedule add's scheduled
// command is parsed with one of its own).
type cmdParse struct {
	p            *parser
	spec         *Spec
	c            Command
	b            binding
	serviceGiven bool
	subErr       error // the scheduled command's error
	seenKeys     uint32
	seenFlags    uint32
	seenWorded   uint32
}

func (cp *cmdParse) fail(problem, suggestion string) (Command, error) {
	return nil, usageErr(cp.spec, problem, suggestion)
}

func (p *parser) parse(toks []token, nested bool) (Command, error) {
	spec, n, uerr := p.lookup(toks)
	if uerr != nil {
		return nil, uerr
	}
	if p.lx.problem != "" && !nested {
		return nil, usageErr(spec, p.lx.problem, "")
	}
	c := spec.new()
	cp := &cmdParse{p: p, spec: spec, c: c, b: bind(c)}
	params := cp.b.params
	pi := 0
	for i := n; i < len(toks); i++ {
		if pi < len(params) {
			if _, ok := params[pi].(subArg); ok {
				params[pi].parse(cp, toks, i)
				if cp.subErr != nil {
					return nil, cp.subErr
				}
				pi++
				break
			}
		}
		j, prob, sugg := cp.word(toks, i, &pi)
		if prob != "" {
			return cp.fail(prob, sugg)
		}
		i = j
	}
	for ; pi < len(params); pi++ {
		pr := params[pi]
		if !pr.optional() {
			return cp.fail(pr.missing(spec.Path), "for example `"+spec.Examples[0]+"`")
		}
		if prob, sugg := pr.fill(cp); prob != "" {
			return cp.fail(prob, sugg)
		}
	}
	if ch, ok := c.(interface{ check() (string, string) }); ok {
		if prob, sugg := ch.check(); prob != "" {
			return cp.fail(prob, sugg)
		}
	}
	if ch, ok := c.(interface {
		checkIn(Options) (string, string)
	}); ok {
		if prob, sugg := ch.checkIn(p.opts); prob != "" {
			return cp.fail(prob, sugg)
		}
	}
	for k, ka := range cp.b.keys {
		if cp.seenKeys&(1<<k) == 0 && ka.k.def != 0 {
			*ka.v = ka.k.def
		}
	}
	return c, nil
}

// word takes the word toks[i] (and those that belong to it); pi is the
// next positional. It returns the index of the last word taken.
func (cp *cmdParse) word(toks []token, i int, pi *int) (int, string, string) {
	t := toks[i]
	params := cp.b.params
	if t.quoted {
		if *pi < len(params) {
			if cron, ok := params[*pi].(cronArg); ok {
				prob, sugg := cron.parseQuoted(cp, t.s)
				*pi++
				return i, prob, sugg
			}
		}
		return i, fmt.Sprintf("unexpected quoted text %s: quotes are only for the cron spec of schedule add", quote(t.s)), ""
	}
	w := t.s
	if lw := strings.ToLower(w); cp.b.to != nil && (lw == "--to" || strings.HasPrefix(lw, "--to=")) {
		return cp.to(toks, i)
	}
	if len(w) > 1 && w[0] == '-' && !isDigits(w[1:]) {
		prob, sugg := cp.flag(toks, i)
		return i, prob, sugg
	}
	for _, wa := range cp.b.words {
		if strings.EqualFold(w, wa.w) {
			if *wa.v {
				return i, wa.w + " is given twice", ""
			}
			*wa.v = true
			return i, "", ""
		}
	}
	if strings.IndexByte(w, '=') >= 0 {
		prob, sugg := cp.key(toks, i)
		return i, prob, sugg
	}
	// A param led by its word (`at 1,8`, `topk 2,4`) may come anywhere
	// after the path, once.
	if k, wa := wordedParam(params, w); wa != nil {
		if cp.seenWorded&(1<<k) != 0 {
			return i, fmt.Sprintf("%s is given twice", strings.ToLower(w)), ""
		}
		cp.seenWorded |= 1 << k
		return wa.parse(cp, toks, i)
	}
	// A DURATION where the service may be left out (`watchdog silence 2h`).
	if *pi+1 < len(params) && isService(params[*pi]) && isDuration(params[*pi+1]) && looksDuration(w) && !cp.p.isService(w) {
		if prob, sugg := params[*pi].fill(cp); prob != "" {
			return i, prob, sugg
		}
		*pi++
	}
	// A positional word. Skip optional params when it is a later literal,
	// the word of a later optional param (`at`), or a range a later param
	// takes; params led by a word are handled above, and skipped here.
	for *pi < len(params) && params[*pi].optional() && cp.skips(params[*pi:], w) {
		if prob, sugg := params[*pi].fill(cp); prob != "" {
			return i, prob, sugg
		}
		*pi++
	}
	if *pi == len(params) {
		prob, sugg := cp.trailing(toks, i)
		return i, prob, sugg
	}
	j, prob, sugg := params[*pi].parse(cp, toks, i)
	*pi++
	return j, prob, sugg
}

// skips reports whether the optional params[0] is left out before the word w.
func (cp *cmdParse) skips(params []positional, w string) bool {
	pr := params[0]
	if _, ok := pr.(worded); ok {
		return true
	}
	if _, ok := pr.(wordArg); ok {
		return true
	}
	if lit := nextLiteral(params); lit != "" && strings.EqualFold(lit, w) {
		return true
	}
	if isService(pr) {
		if rangeLike(w) && later[rangeArg](params[1:]) {
			return true
		}
		if strings.Contains(w, ":") && later[loadTableArg](params[1:]) {
			return true
		}
	}
	return false
}

func isService(p positional) bool  { _, ok := p.(serviceArg); return ok }
func isDuration(p positional) bool { _, ok := p.(durationArg); return ok }

// later reports whether one of params is of kind T.
func later[T positional](params []positional) bool {
	for _, p := range params {
		if _, ok := p.(T); ok {
			return true
		}
	}
	return false
}

// wordedParam returns the param led by the word w (`at`, `topk`, `draft`)
// and its index, or nil.
func wordedParam(params []positional, w string) (int, worded) {
	for k, p := range params {
		if wp, ok := p.(worded); ok && strings.EqualFold(wp.word(), w) {
			return k, wp
		}
	}
	return -1, nil
}

// nextLiteral returns the first literal word among params before a required
// non-literal one, or "".
func nextLiteral(params []positional) string {
	for _, p := range params {
		if l, ok := p.(literalArg); ok {
			return l.lit
		}
		if !p.optional() {
			return ""
		}
	}
	return ""
}

// wordList reads the list after a param's word at toks[i]: `at 1, 8`.
func (cp *cmdParse) wordList(word, what string, toks []token, i int) (int, string, string, string) {
	spec := cp.spec
	if i+1 >= len(toks) || toks[i+1].quoted {
		return i, "", fmt.Sprintf("%s needs %s after %q", spec.Path, what, word), "for example `" + spec.Examples[1] + "`"
	}
	j, list := joinList(toks, i+1, toks[i+1].s)
	return j, list, "", ""
}

// to reads --to TARGETS (or --to=TARGETS) at toks[i].
func (cp *cmdParse) to(toks []token, i int) (int, string, string) {
	w := toks[i].s
	val, ok := strings.CutPrefix(w[2:], w[2:4]+"=")
	if !ok {
		if i+1 >= len(toks) || toks[i+1].quoted {
			return i, "--to needs TARGETS, e.g. --to slack:C0OPS,matrix:!ops:example.org", ""
		}
		i++
		val = toks[i].s
	}
	if *cp.b.to.v != "" {
		return i, "--to is given twice: list every target in one, comma separated", ""
	}
	ts, err := ParseTargets(val)
	if err != nil {
		return i, err.Error(), ""
	}
	*cp.b.to.v = FormatTargets(ts)
	return i, "", ""
}

// allFlags are the language's flags, in usage order.
var allFlags = []*flagDef{&flagNoStart, &flagForce, &flagApplyBest, &flagDryRun}

func (cp *cmdParse) flag(toks []token, i int) (string, string) {
	path := cp.spec.Path
	w := strings.ToLower(toks[i].s)
	for k, f := range cp.b.flags {
		if f.def.name != w {
			continue
		}
		if cp.seenFlags&(1<<k) != 0 {
			return fmt.Sprintf("%s is given twice", f.def.name), ""
		}
		cp.seenFlags |= 1 << k
		*f.v = true
		return "", ""
	}
	for _, f := range allFlags {
		if f.name != w {
			continue
		}
		if f == &flagDryRun {
			return fmt.Sprintf("%s is read-only: it does not take --dry-run", path), ""
		}
		return fmt.Sprintf("%s does not take %s", path, f.name), ""
	}
	if word, ok := isEngineFlag(cp.b, w); ok {
		return fmt.Sprintf("write the engine flag without its dashes: %s", word), didYouMean(replaceWord(toks, i, word))
	}
	names := make([]string, len(cp.b.flags))
	for k, f := range cp.b.flags {
		names[k] = f.def.name
	}
	sugg := ""
	if m := closest(w, names); m != "" {
		sugg = didYouMean(replaceWord(toks, i, m))
	} else if m := closest("--"+strings.TrimLeft(w, "-"), names); m != "" {
		sugg = didYouMean(replaceWord(toks, i, m))
	}
	if len(names) == 0 {
		return fmt.Sprintf("unknown flag %s: %s takes no flags", quote(toks[i].s), path), sugg
	}
	return fmt.Sprintf("unknown flag %s: %s takes %s", quote(toks[i].s), path, strings.Join(names, ", ")), sugg
}

func (cp *cmdParse) key(toks []token, i int) (string, string) {
	path := cp.spec.Path
	name, val, _ := strings.Cut(toks[i].s, "=")
	for k, ka := range cp.b.keys {
		if !strings.EqualFold(ka.k.name, name) {
			continue
		}
		if cp.seenKeys&(1<<k) != 0 {
			return fmt.Sprintf("%s is given twice", ka.k.name), ""
		}
		cp.seenKeys |= 1 << k
		v, prob := parseInt(val, ka.k.min, ka.k.max, ka.k.name)
		if prob != "" {
			return prob, ""
		}
		*ka.v = v
		return "", ""
	}
	lname := strings.ToLower(name)
	for _, pr := range cp.b.params {
		if l, ok := pr.(literalArg); ok && l.lit == lname {
			return fmt.Sprintf("write %s %s without =", l.lit, val), didYouMean(replaceWord(toks, i, l.lit+" "+val))
		}
	}
	if len(cp.b.keys) == 0 {
		return fmt.Sprintf("%s takes no key=value arguments, got %s", path, quote(toks[i].s)), ""
	}
	names := make([]string, len(cp.b.keys))
	for k, ka := range cp.b.keys {
		names[k] = ka.k.name
	}
	sugg := ""
	m := closest(lname, names)
	if m == "" {
		if a := keyAliases[lname]; a != "" {
			for _, n := range names {
				if n == a {
					m = a
				}
			}
		}
	}
	if m != "" {
		sugg = didYouMean(replaceWord(toks, i, m+"="+val))
	}
	return fmt.Sprintf("unknown key %s: %s takes %s", quote(name), path, keyList(names)), sugg
}

func keyList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + "=N"
	}
	return strings.Join(out, ", ")
}

func (cp *cmdParse) trailing(toks []token, i int) (string, string) {
	w := toks[i].s
	prob := fmt.Sprintf("unexpected %s after `%s`", quote(w), replaceWord(toks[:i], -1, ""))
	if isDigits(w) && len(cp.b.keys) > 0 {
		return prob, didYouMean(replaceWord(toks, i, cp.b.keys[0].k.name+"="+w))
	}
	if cp.p.findService(w) != nil {
		for j, pr := range cp.b.params {
			if isService(pr) && !cp.serviceGiven {
				// the service came in the wrong place: move it to where it belongs
				return prob, didYouMean(moveWord(toks, i, j+pathWords(cp.spec)))
			}
		}
		if cp.serviceGiven {
			return prob + ": one service per command", ""
		}
	}
	return prob, ""
}

func pathWords(s *Spec) int { return strings.Count(s.Path, " ") + 1 }

// defaultService resolves a SERVICE left out into on.
func (cp *cmdParse) defaultService(on *On) (string, string) {
	p := cp.p
	if d := p.opts.DefaultService; d != "" {
		if s := p.findService(d); s != nil {
			on.Service, on.Host = s.Name, s.Host
			return "", ""
		}
		if g, reps := p.findReplicated(d); g != "" {
			return cp.onGroup(on, g, reps, "")
		}
	}
	switch len(p.opts.Services) {
	case 1:
		on.Service, on.Host = p.opts.Services[0].Name, p.opts.Services[0].Host
		return "", ""
	case 0:
		return fmt.Sprintf("%s needs a service, and no services are configured", cp.spec.Path), ""
	}
	if gs := p.replicated(); len(gs) == 1 {
		if g, reps := p.findReplicated(gs[0]); len(reps) == len(p.opts.Services) {
			// The one service configured is replicated.
			return cp.onGroup(on, g, reps, "")
		}
	}
	names := p.serviceNames()
	on.Service, on.Host = p.opts.Services[0].Name, p.opts.Services[0].Host
	example := render(cp.c)
	*on = On{}
	return fmt.Sprintf("which service? %d are configured: %s", len(names), strings.Join(names, ", ")),
		"name one, for example `" + example + "`, or set default_service in the config"
}

// parseSub parses the scheduled command of schedule add.
func (p *parser) parseSub(toks []token) (Command, error) {
	sub, err := p.parse(toks, true)
	if err != nil {
		if ue, ok := err.(*UsageError); ok {
			ue2 := *ue
			ue2.Problem = "in the scheduled command: " + ue.Problem
			return nil, &ue2
		}
		return nil, err
	}
	add := scheduleAddSpec
	path := sub.Spec().Path
	if !sub.Spec().Schedulable {
		return nil, usageErr(add, fmt.Sprintf("%s cannot be scheduled: only %s can", path, SchedulableList()), "")
	}
	if IsDryRun(sub) {
		return nil, usageErr(add, "a scheduled command cannot be a dry run", "to preview the schedule put --dry-run before the cron spec: `schedule add --dry-run \"...\" "+path+" ...`")
	}
	return sub, nil
}

// SchedulableList names the commands that `schedule add` (and the config's
// schedules) accept: "mtp steps, mtp tune, ... or sweep".
func SchedulableList() string {
	var names []string
	for _, s := range registry {
		if s.Schedulable {
			names = append(names, s.Path)
		}
	}
	return orList(names)
}

// lookup identifies the Spec from the first words; n is how many it used.
func (p *parser) lookup(toks []token) (spec *Spec, n int, err *UsageError) {
	if len(toks) == 0 || toks[0].quoted {
		if p.lx.problem != "" && len(toks) == 0 {
			return nil, 0, usageErr(nil, p.lx.problem, "")
		}
		return nil, 0, usageErr(nil, "a command starts with a command word, not quoted text", "`help` lists the commands")
	}
	w := toks[0].s
	e := findGroup(w)
	if e == nil {
		if p.lx.problem != "" {
			return nil, 0, usageErr(nil, p.lx.problem, "")
		}
		sugg := ""
		if g := closest(w, groups); g != "" {
			sugg = didYouMean(replaceWord(toks, 0, g))
		}
		if sugg == "" {
			sugg = "`help` lists the commands"
		}
		return nil, 0, usageErr(nil, fmt.Sprintf("unknown command %s", quote(w)), sugg)
	}
	group, specs, subs := e.name, e.specs, e.subs
	if subs == nil {
		return specs[0], 1, nil
	}
	if len(toks) < 2 || toks[1].quoted {
		if p.lx.problem != "" && len(toks) < 2 {
			return nil, 0, &UsageError{Problem: p.lx.problem, Usage: groupUsage(group)}
		}
		return nil, 0, &UsageError{Problem: fmt.Sprintf("%s needs a subcommand: %s", group, orList(subs)), Usage: groupUsage(group)}
	}
	w2 := toks[1].s
	for i, sub := range subs {
		if strings.EqualFold(sub, w2) {
			return specs[i], 2, nil
		}
	}
	return nil, 0, &UsageError{Problem: fmt.Sprintf("unknown command %s", quote(group+" "+w2)), Usage: groupUsage(group),
		Suggestion: subSuggestion(group, subs, toks)}
}

// subSuggestion suggests the subcommand meant by toks[1].
func subSuggestion(group string, subs []string, toks []token) string {
	w2 := toks[1].s
	if k, v, ok := strings.Cut(w2, "="); ok {
		sugg := ""
		for _, sub := range subs {
			if strings.EqualFold(k, sub) {
				sugg = didYouMean(group + " " + sub + " " + v)
			}
		}
		if sugg != "" {
			return sugg
		}
	}
	if group == "mtp" && isDigits(w2) {
		return didYouMean(replaceWord(toks, 1, "steps "+w2))
	}
	if sub := closest(w2, subs); sub != "" {
		return didYouMean(replaceWord(toks, 1, sub))
	}
	if a := subAliases[group+" "+strings.ToLower(w2)]; a != "" {
		return didYouMean(replaceWord(toks, 1, a))
	}
	return ""
}

// subAliases are words people try for a subcommand; only ever suggested.
var subAliases = map[string]string{
	"schedule ls": "list", "schedule delete": "rm", "schedule remove": "rm", "schedule del": "rm",
	"schedule new": "add", "schedule create": "add", "schedule enable": "resume", "schedule disable": "pause",
	"svc show": "status", "svc journal": "logs", "svc log": "logs", "gpu reset": "recover", "gpu clear": "recover",
	"gpu reap": "recover", "gpu show": "status", "gpu ls": "status", "mtp set": "steps", "mtp get": "show",
	"mtp status": "show",
}

// keyAliases are key names people try; only ever suggested.
var keyAliases = map[string]string{
	"input": "in", "input-len": "in", "input_len": "in", "isl": "in", "prompt-len": "in",
	"output": "out", "output-len": "out", "output_len": "out", "osl": "out", "max-tokens": "out", "max_tokens": "out",
	"c": "concurrency", "conc": "concurrency", "parallel": "concurrency",
	"n": "prompts", "num-prompts": "prompts", "num_prompts": "prompts", "requests": "prompts",
	"lines": "lines", "limit": "n", "count": "n", "last": "n", "tail": "lines",
}

func orList(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// replaceWord renders toks with toks[i] replaced by w (for suggestions).
func replaceWord(toks []token, i int, w string) string {
	var b strings.Builder
	for j, t := range toks {
		if j > 0 {
			b.WriteByte(' ')
		}
		switch {
		case j == i:
			b.WriteString(w)
		case t.quoted:
			b.WriteByte('"')
			b.WriteString(t.s)
			b.WriteByte('"')
		default:
			b.WriteString(t.s)
		}
	}
	return b.String()
}

// moveWord renders toks with toks[from] moved to index to (for suggestions).
func moveWord(toks []token, from, to int) string {
	out := make([]token, 0, len(toks))
	for j, t := range toks {
		if j == to {
			out = append(out, toks[from])
		}
		if j != from {
			out = append(out, t)
		}
	}
	return replaceWord(out, -1, "")
}

func atoi(s string) int {
	v := 0
	for i := 0; i < len(s); i++ {
		v = v*10 + int(s[i]-'0')
	}
	return v
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseInt parses plain decimal digits in [lo, hi]; problem is "" when it is valid.
func parseInt(s string, lo, hi int, what string) (int, string) {
	if s == "" {
		return 0, what + " needs a number"
	}
	if !isDigits(s) {
		if len(s) > 1 && (s[0] == '-' || s[0] == '+') && isDigits(s[1:]) {
			return 0, fmt.Sprintf("%s must be between %d and %d, got %s", what, lo, hi, s)
		}
		return 0, fmt.Sprintf("%s must be a whole number between %d and %d, got %s", what, lo, hi, quote(s))
	}
	if len(s) > 9 {
		return 0, fmt.Sprintf("%s must be between %d and %d, got %s", what, lo, hi, shorten(s))
	}
	v := atoi(s)
	if v < lo || v > hi {
		return 0, fmt.Sprintf("%s must be between %d and %d, got %d", what, lo, hi, v)
	}
	return v, ""
}

func shorten(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// parseID parses a positive id, optionally written #42.
func parseID(s, what string) (int64, string) {
	s = strings.TrimPrefix(s, "#")
	if !isDigits(s) || len(s) > 18 {
		return 0, fmt.Sprintf("%s must be a number like 42 or #42, got %s", what, quote(s))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Sprintf("%s must be a positive number, got %s", what, s)
	}
	return v, ""
}

// rangeLike reports whether w starts like a number or a range (`1..16`):
// never a service name in a place where a range may come.
func rangeLike(w string) bool { return w != "" && w[0] >= '0' && w[0] <= '9' }

// listJoins reports whether two adjacent words belong to one sweep list
// (`1, 2, 3` or `1 ,2` or `1 .. 5`).
func listJoins(a, b string) bool {
	if b == "" || a == "" {
		return false
	}
	la, fb := a[len(a)-1], b[0]
	if la == ',' || fb == ',' || la == '.' || fb == '.' {
		return strings.Trim(b, "0123456789,.") == ""
	}
	return false
}

// nameOr is "NAME " for a service name, "" for none.
func nameOr(service string) string {
	if service == "" {
		return ""
	}
	return service + " "
}
