package commands

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Parse parses one command typed in chat or a terminal and validates it against
// opts. The text is normalised first (see the package doc: smart quotes, dashes,
// odd spaces, a leading / or !); command words, keys, flags and names are
// case-insensitive. Names are resolved: a missing SERVICE becomes the only
// configured service, and Host is filled from the service.
//
// Any invalid input, including anything that looks like a shell line
// (`;`, `|`, `&&`, `$(...)`, backticks, a second line), returns a *UsageError;
// nothing else is ever returned as an error. On success Command.Text is the
// canonical rendering and Parse(c.Text, opts) returns an equal Command.
// Parse is safe for concurrent use and does no I/O.
func Parse(text string, opts Options) (*Command, error) {
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
	sugg := ""
	if k, v, ok := strings.Cut(w2, "="); ok {
		for _, sub := range subs {
			if strings.EqualFold(k, sub) {
				sugg = didYouMean(group + " " + sub + " " + v)
			}
		}
	}
	if sugg == "" && group == "mtp" && isDigits(w2) {
		sugg = didYouMean(replaceWord(toks, 1, "steps "+w2))
	}
	if sugg == "" {
		if sub := closest(w2, subs); sub != "" {
			sugg = didYouMean(replaceWord(toks, 1, sub))
		} else if a := subAliases[group+" "+strings.ToLower(w2)]; a != "" {
			sugg = didYouMean(replaceWord(toks, 1, a))
		}
	}
	return nil, 0, &UsageError{Problem: fmt.Sprintf("unknown command %s", quote(group+" "+w2)), Usage: groupUsage(group), Suggestion: sugg}
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
	v := 0
	for i := 0; i < len(s); i++ {
		v = v*10 + int(s[i]-'0')
	}
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

func (p *parser) parse(toks []token, nested bool) (*Command, error) {
	spec, n, uerr := p.lookup(toks)
	if uerr != nil {
		return nil, uerr
	}
	if p.lx.problem != "" && !nested {
		return nil, usageErr(spec, p.lx.problem, "")
	}
	c := &Command{Spec: spec}
	fail := func(problem, suggestion string) (*Command, error) {
		return nil, usageErr(spec, problem, suggestion)
	}
	params := spec.params
	pi := 0
	var seenKeys uint32
	var seenFlags flagBit
	var seenWorded uint32
	serviceGiven := false
	for i := n; i < len(toks); i++ {
		t := toks[i]
		if pi < len(params) && params[pi].kind == pSub {
			sub, err := p.parseSub(toks[i:])
			if err != nil {
				return nil, err
			}
			c.Sub = sub
			pi++
			break
		}
		if t.quoted {
			if pi < len(params) && params[pi].kind == pCron {
				canon, err := ValidateCron(t.s)
				if err != nil {
					return fail(err.Error(), "for example "+"`"+spec.Examples[0]+"`")
				}
				c.Cron = canon
				pi++
				continue
			}
			return fail(fmt.Sprintf("unexpected quoted text %s: quotes are only for the cron spec of schedule add", quote(t.s)), "")
		}
		w := t.s
		if lw := strings.ToLower(w); spec.targets && (lw == "--to" || strings.HasPrefix(lw, "--to=")) {
			val, ok := strings.CutPrefix(w[2:], w[2:4]+"=")
			if !ok {
				if i+1 >= len(toks) || toks[i+1].quoted {
					return fail("--to needs TARGETS, e.g. --to slack:C0OPS,matrix:!ops:example.org", "")
				}
				i++
				val = toks[i].s
			}
			if c.To != "" {
				return fail("--to is given twice: list every target in one, comma separated", "")
			}
			ts, err := ParseTargets(val)
			if err != nil {
				return fail(err.Error(), "")
			}
			c.To = FormatTargets(ts)
			continue
		}
		if len(w) > 1 && w[0] == '-' && !isDigits(w[1:]) {
			prob, sugg := p.flag(c, toks, i, &seenFlags)
			if prob != "" {
				return fail(prob, sugg)
			}
			continue
		}
		if strings.EqualFold(w, perLoadWord) && slices.ContainsFunc(params, func(pr param) bool { return pr.kind == pPerLoad }) {
			if c.PerLoad {
				return fail(perLoadWord+" is given twice", "")
			}
			c.PerLoad = true
			continue
		}
		if eq := strings.IndexByte(w, '='); eq >= 0 {
			prob, sugg := p.key(c, toks, i, &seenKeys)
			if prob != "" {
				return fail(prob, sugg)
			}
			continue
		}
		// A param led by its word (`at 1,8`, `topk 2,4`) may come anywhere
		// after the path, once.
		if k := wordedIndex(params, w); k >= 0 {
			if seenWorded&(1<<k) != 0 {
				return fail(fmt.Sprintf("%s is given twice", strings.ToLower(w)), "")
			}
			seenWorded |= 1 << k
			j, prob, sugg := p.worded(c, params[k], toks, i)
			if prob != "" {
				return fail(prob, sugg)
			}
			i = j
			continue
		}
		// A DURATION where the service may be left out (`watchdog silence 2h`).
		if pi+1 < len(params) && params[pi].kind == pService && params[pi+1].kind == pDuration && looksDuration(w) &&
			!p.isService(w) {
			if prob, sugg := p.fillDefault(c, params[pi]); prob != "" {
				return fail(prob, sugg)
			}
			pi++
		}
		// A positional word. Skip optional params when it is a later literal,
		// the word of a later optional param (`at`), or a range a later param
		// takes; params led by a word are handled above, and skipped here.
		for pi < len(params) && params[pi].optional() {
			pr := params[pi]
			lit := nextLiteral(params[pi:])
			skip := pr.word0() != "" || (lit != "" && strings.EqualFold(lit, w)) ||
				(pr.kind == pService && rangeLike(w) && laterKind(params[pi+1:], pRange)) ||
				(pr.kind == pService && strings.Contains(w, ":") && laterKind(params[pi+1:], pLoadTable))
			if !skip {
				break
			}
			if prob, sugg := p.fillDefault(c, pr); prob != "" {
				return fail(prob, sugg)
			}
			pi++
		}
		if pi == len(params) {
			return fail(p.trailing(c, toks, i, serviceGiven))
		}
		switch pr := params[pi]; pr.kind {
		case pSteps:
			v, prob := parseInt(w, 1, p.opts.maxSteps(), "steps")
			if prob != "" {
				sugg := ""
				if !isDigits(w) && i+1 < len(toks) && isDigits(toks[i+1].s) {
					sugg = didYouMean(moveWord(toks, i+1, i))
				} else if isDigits(w) && len(w) <= 9 && atoi(w) > p.opts.maxSteps() {
					sugg = "an admin can raise the steps limit in the config"
				}
				return fail(prob, sugg)
			}
			c.Steps = v
		case pService:
			if prob, sugg := p.service(c, toks, i); prob != "" {
				return fail(prob, sugg)
			}
			serviceGiven = true
		case pHost:
			if prob, sugg := p.host(c, w); prob != "" {
				return fail(prob, sugg)
			}
		case pTarget:
			if prob, sugg := p.target(c, w); prob != "" {
				return fail(prob, sugg)
			}
			serviceGiven = true
		case pLiteral:
			if !strings.EqualFold(w, pr.word) {
				sugg := ""
				if strings.ContainsAny(w, ",.") || isDigits(w) {
					sugg = didYouMean(replaceWord(toks, i, pr.word+" "+w))
				} else if closest(w, []string{pr.word}) != "" {
					sugg = didYouMean(replaceWord(toks, i, pr.word))
				}
				return fail(fmt.Sprintf("expected %q, got %s", pr.word, quote(w)), sugg)
			}
		case pTopic:
			j := i
			for j+1 < len(toks) && !toks[j+1].quoted && !strings.HasPrefix(toks[j+1].s, "-") && !strings.Contains(toks[j+1].s, "=") {
				j++
			}
			if prob, sugg := p.topic(c, toks[i:j+1]); prob != "" {
				return fail(prob, sugg)
			}
			i = j
		case pStepList:
			j := i
			list := w
			for j+1 < len(toks) && !toks[j+1].quoted && listJoins(toks[j].s, toks[j+1].s) {
				j++
				list += toks[j].s
			}
			vals, prob, sugg := parseStepList(list, p.opts.maxSteps())
			if prob != "" {
				return fail(prob, sugg)
			}
			c.SweepSteps = vals
			i = j
		case pLoadTable:
			j := i
			words := []string{w}
			for j+1 < len(toks) && !toks[j+1].quoted && !strings.HasPrefix(toks[j+1].s, "-") && strings.Contains(toks[j+1].s, ":") {
				j++
				words = append(words, toks[j].s)
			}
			tab, prob := parseLoadTable(strings.Join(words, ","), p.opts.maxSteps())
			if prob != "" {
				return fail(prob, "for example `"+spec.Examples[0]+"`")
			}
			c.LoadTable = tab
			i = j
		case pRange:
			j := i
			rng := w
			for j+1 < len(toks) && !toks[j+1].quoted && listJoins(toks[j].s, toks[j+1].s) {
				j++
				rng += toks[j].s
			}
			from, to, prob, sugg := parseRange(rng, p.opts.maxSteps())
			if prob != "" {
				return fail(prob, sugg)
			}
			c.TuneFrom, c.TuneTo = from, to
			i = j
		case pAll:
			if !strings.EqualFold(w, "all") {
				sugg := ""
				if closest(w, []string{"all"}) != "" {
					sugg = didYouMean(replaceWord(toks, i, "all"))
				}
				return fail(fmt.Sprintf("unexpected %s: %s takes only the word all", quote(w), spec.Path), sugg)
			}
			c.All = true
		case pJobID:
			v, prob := parseID(w, "the job id")
			if prob != "" {
				return fail(prob, "")
			}
			c.JobID = v
		case pDuration:
			d, prob := ParseDuration(w)
			if prob != "" {
				return fail(prob, "")
			}
			c.Duration = d
		case pIncidentID:
			v, prob := parseID(w, "the incident number")
			if prob != "" {
				return fail(prob, "the alert shows it: incident #7")
			}
			c.IncidentID = v
		case pScheduleID:
			v, prob := parseID(w, "the schedule id")
			if prob != "" {
				return fail(prob, "`schedule list` shows the ids")
			}
			c.ScheduleID = v
		case pCron:
			if strings.HasPrefix(w, "@") && !strings.ContainsAny(w, "*") {
				cs := w
				if strings.EqualFold(w, "@every") && i+1 < len(toks) && !toks[i+1].quoted {
					i++
					cs += " " + toks[i].s
				}
				canon, err := ValidateCron(cs)
				if err != nil {
					return fail(err.Error(), "")
				}
				c.Cron = canon
				break
			}
			sugg := ""
			if len(toks)-i > 5 {
				var b strings.Builder
				b.WriteString(spec.Path)
				b.WriteString(` "`)
				for j := i; j < i+5; j++ {
					if j > i {
						b.WriteByte(' ')
					}
					b.WriteString(toks[j].s)
				}
				b.WriteByte('"')
				for _, t := range toks[i+5:] {
					b.WriteByte(' ')
					b.WriteString(t.s)
				}
				sugg = didYouMean(b.String())
			}
			return fail(fmt.Sprintf("the cron spec must be in quotes, got %s", quote(w)), sugg)
		}
		pi++
	}
	for ; pi < len(params); pi++ {
		pr := params[pi]
		if !pr.optional() {
			return fail(missing(spec, pr), "for example `"+spec.Examples[0]+"`")
		}
		if prob, sugg := p.fillDefault(c, pr); prob != "" {
			return fail(prob, sugg)
		}
	}
	if slices.ContainsFunc(params, func(pr param) bool { return pr.kind == pPerLoad }) {
		switch {
		case c.PerLoad && len(c.SweepAt) < 2:
			return fail(spec.Path+" "+perLoadWord+" needs two concurrencies or more after at", didYouMean(spec.Path+" "+nameOr(c.Service)+perLoadWord+" at 1,8,32,64"))
		case !c.PerLoad && len(c.SweepAt) > 1:
			return fail(spec.Path+" benchmarks at one concurrency; to tune for several, say "+perLoadWord, didYouMean(spec.Path+" "+nameOr(c.Service)+perLoadWord+" at "+formatList(c.SweepAt)))
		case c.PerLoad:
			sorted := slices.Sorted(slices.Values(c.SweepAt))
			c.SweepAt, c.Bench.Concurrency = sorted, 0
		default:
			c.SweepAt = nil
		}
	}
	if len(c.SweepDraft) > 0 && !slices.ContainsFunc(c.SweepTopK, func(k int) bool { return k > 1 }) {
		return fail("draft tokens follow steps when topk is 1 (SGLang makes them steps+1): a draft LIST needs a topk LIST with a value above 1",
			"for example `"+spec.Examples[2]+"`")
	}
	for k := range spec.keys {
		if seenKeys&(1<<k) == 0 && spec.keys[k].def != 0 {
			spec.keys[k].set(c, spec.keys[k].def)
		}
	}
	c.Text = render(c)
	return c, nil
}

// fillDefault resolves an optional param that was left out.
func (p *parser) fillDefault(c *Command, pr param) (string, string) {
	switch pr.kind {
	case pService, pTarget:
		return p.defaultService(c)
	case pHost:
		c.Host = p.defaultHost()
	case pRange:
		c.TuneFrom, c.TuneTo = 1, min(DefaultTuneTo, p.opts.maxSteps())
	}
	return "", ""
}

// worded parses an optional param led by its word (`at 1,8`, `topk 2,4`,
// `draft 8,16`) whose word is toks[i]; it returns the index of the list's
// last token.
func (p *parser) worded(c *Command, pr param, toks []token, i int) (int, string, string) {
	spec := c.Spec
	if i+1 >= len(toks) || toks[i+1].quoted {
		what := "a concurrency"
		if pr.kind == pTopKList || pr.kind == pDraftList {
			what = "a list"
		}
		return i, fmt.Sprintf("%s needs %s after %q", spec.Path, what, pr.word0()), "for example `" + spec.Examples[1] + "`"
	}
	j := i + 1
	list := toks[j].s
	for j+1 < len(toks) && !toks[j+1].quoted && listJoins(toks[j].s, toks[j+1].s) {
		j++
		list += toks[j].s
	}
	switch pr.kind {
	case pTopKList, pDraftList:
		lo, hi, what := 1, MaxTopK, "each topk"
		if pr.kind == pDraftList {
			lo, hi, what = 2, MaxDraftTokens, "each draft token count"
		}
		vals, prob := parseIntList(list, lo, hi, what, pr.word0())
		if prob != "" {
			return j, prob, ""
		}
		if pr.kind == pTopKList {
			c.SweepTopK = vals
		} else {
			c.SweepDraft = vals
		}
	case pAt:
		if !strings.ContainsAny(list, ",.") {
			v, prob := parseInt(list, keyConcurrency.min, keyConcurrency.max, "the concurrency")
			if prob != "" {
				return j, prob, ""
			}
			c.Bench.Concurrency = v
			c.SweepAt = []int{v}
			break
		}
		vals, prob := parseConcList(list)
		if prob != "" {
			return j, prob, ""
		}
		c.SweepAt = vals
	default:
		vals, prob := parseConcList(list)
		if prob != "" {
			return j, prob, ""
		}
		c.SweepAt = vals
	}
	return j, "", ""
}

// wordedIndex returns the index of the param of params led by the word w
// (`at`, `topk`, `draft`), or -1.
func wordedIndex(params []param, w string) int {
	for k, p := range params {
		if w0 := p.word0(); w0 != "" && strings.EqualFold(w0, w) {
			return k
		}
	}
	return -1
}

// laterKind reports whether one of params is of kind k.
func laterKind(params []param, k pkind) bool {
	for _, p := range params {
		if p.kind == k {
			return true
		}
	}
	return false
}

// rangeLike reports whether w starts like a number or a range (`1..16`):
// never a service name in a place where a range may come.
func rangeLike(w string) bool { return w != "" && w[0] >= '0' && w[0] <= '9' }

func missing(spec *Spec, pr param) string {
	switch pr.kind {
	case pSteps:
		return spec.Path + " needs N, the number of speculative steps"
	case pLiteral, pStepList:
		return spec.Path + " needs steps LIST, e.g. steps 1..5,10"
	case pJobID:
		return spec.Path + " needs a JOB id (`jobs` lists them)"
	case pScheduleID:
		return spec.Path + " needs a schedule ID (`schedule list` shows them)"
	case pDuration:
		return spec.Path + " needs a DURATION, e.g. 2h"
	case pIncidentID:
		return spec.Path + " needs the INCIDENT number the alert shows"
	case pCron:
		return spec.Path + ` needs a "CRON" spec in quotes`
	case pSub:
		return spec.Path + " needs the COMMAND to run"
	}
	return spec.Path + " needs " + pr.usage()
}

// nextLiteral returns the first literal word among params before a required
// non-literal one, or "".
func nextLiteral(params []param) string {
	for _, p := range params {
		if p.kind == pLiteral {
			return p.word
		}
		if !p.optional() {
			return ""
		}
	}
	return ""
}

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

func (p *parser) flag(c *Command, toks []token, i int, seen *flagBit) (string, string) {
	spec := c.Spec
	w := strings.ToLower(toks[i].s)
	for _, f := range flagNames {
		if f.name != w {
			continue
		}
		if spec.flags&f.f == 0 {
			if f.f == fDryRun {
				return fmt.Sprintf("%s is read-only: it does not take --dry-run", spec.Path), ""
			}
			return fmt.Sprintf("%s does not take %s", spec.Path, f.name), ""
		}
		if *seen&f.f != 0 {
			return fmt.Sprintf("%s is given twice", f.name), ""
		}
		*seen |= f.f
		c.setFlag(f.f)
		return "", ""
	}
	var names []string
	for _, f := range flagNames {
		if spec.flags&f.f != 0 {
			names = append(names, f.name)
		}
	}
	sugg := ""
	if m := closest(w, names); m != "" {
		sugg = didYouMean(replaceWord(toks, i, m))
	} else if m := closest("--"+strings.TrimLeft(w, "-"), names); m != "" {
		sugg = didYouMean(replaceWord(toks, i, m))
	}
	if len(names) == 0 {
		return fmt.Sprintf("unknown flag %s: %s takes no flags", quote(toks[i].s), spec.Path), sugg
	}
	return fmt.Sprintf("unknown flag %s: %s takes %s", quote(toks[i].s), spec.Path, strings.Join(names, ", ")), sugg
}

func (p *parser) key(c *Command, toks []token, i int, seen *uint32) (string, string) {
	spec := c.Spec
	name, val, _ := strings.Cut(toks[i].s, "=")
	for k := range spec.keys {
		kk := &spec.keys[k]
		if !strings.EqualFold(kk.name, name) {
			continue
		}
		if *seen&(1<<k) != 0 {
			return fmt.Sprintf("%s is given twice", kk.name), ""
		}
		*seen |= 1 << k
		v, prob := parseInt(val, kk.min, kk.max, kk.name)
		if prob != "" {
			return prob, ""
		}
		kk.set(c, v)
		return "", ""
	}
	lname := strings.ToLower(name)
	for _, pr := range spec.params {
		if pr.kind == pLiteral && pr.word == lname {
			return fmt.Sprintf("write %s %s without =", pr.word, val), didYouMean(replaceWord(toks, i, pr.word+" "+val))
		}
	}
	if len(spec.keys) == 0 {
		return fmt.Sprintf("%s takes no key=value arguments, got %s", spec.Path, quote(toks[i].s)), ""
	}
	names := make([]string, len(spec.keys))
	for k := range spec.keys {
		names[k] = spec.keys[k].name
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
	return fmt.Sprintf("unknown key %s: %s takes %s", quote(name), spec.Path, keyList(names)), sugg
}

func keyList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + "=N"
	}
	return strings.Join(out, ", ")
}

// serviceNames lists the configured services.
func (p *parser) isService(w string) bool {
	for _, s := range p.opts.Services {
		if s.Name == w {
			return true
		}
	}
	return false
}

func (p *parser) serviceNames() []string {
	names := make([]string, len(p.opts.Services))
	for i, s := range p.opts.Services {
		names[i] = s.Name
	}
	return names
}

func (p *parser) findService(w string) *ServiceRef {
	for i := range p.opts.Services {
		if strings.EqualFold(p.opts.Services[i].Name, w) {
			return &p.opts.Services[i]
		}
	}
	return nil
}

// knownHosts lists Hosts and then the service hosts not among them.
func (p *parser) knownHosts() []string {
	out := append([]string(nil), p.opts.Hosts...)
	for _, s := range p.opts.Services {
		dup := false
		for _, h := range out {
			dup = dup || h == s.Host
		}
		if !dup {
			out = append(out, s.Host)
		}
	}
	return out
}

func (p *parser) findHost(w string) string {
	for _, h := range p.opts.Hosts {
		if strings.EqualFold(h, w) {
			return h
		}
	}
	for _, s := range p.opts.Services {
		if strings.EqualFold(s.Host, w) {
			return s.Host
		}
	}
	return ""
}

// badName checks w against the name grammar.
func badName(w, what string) string {
	if ValidName(strings.ToLower(w)) {
		return ""
	}
	if len(w) > MaxNameLen {
		return fmt.Sprintf("%s name is too long (at most %d characters)", what, MaxNameLen)
	}
	return fmt.Sprintf("%s is not a %s name (letters, digits, . _ -)", quote(w), what)
}

func (p *parser) service(c *Command, toks []token, i int) (string, string) {
	w := toks[i].s
	if prob := badName(w, "service"); prob != "" {
		return prob, ""
	}
	if s := p.findService(w); s != nil {
		c.Service, c.Host = s.Name, s.Host
		return "", ""
	}
	if isDigits(w) && len(c.Spec.keys) > 0 {
		k := c.Spec.keys[0].name
		return fmt.Sprintf("unexpected number %s", w), didYouMean(replaceWord(toks, i, k+"="+w))
	}
	return p.unknownService(w, toks, i)
}

func (p *parser) unknownService(w string, toks []token, i int) (string, string) {
	names := p.serviceNames()
	sugg := ""
	if m := closest(w, names); m != "" {
		sugg = didYouMean(replaceWord(toks, i, m))
	}
	if len(names) == 0 {
		return fmt.Sprintf("unknown service %s: no services are configured", quote(w)), sugg
	}
	return fmt.Sprintf("unknown service %s: the services are %s", quote(w), strings.Join(names, ", ")), sugg
}

func (p *parser) host(c *Command, w string) (string, string) {
	if prob := badName(w, "host"); prob != "" {
		return prob, ""
	}
	if h := p.findHost(w); h != "" {
		c.Host = h
		return "", ""
	}
	if s := p.findService(w); s != nil {
		c.Host = s.Host
		return "", ""
	}
	hosts := p.knownHosts()
	sugg := ""
	if m := closest(w, append(hosts, p.serviceNames()...)); m != "" {
		sugg = didYouMean(c.Spec.Path + " " + m)
	}
	if len(hosts) == 0 {
		return fmt.Sprintf("unknown host %s: no hosts are configured", quote(w)), sugg
	}
	return fmt.Sprintf("unknown host %s: the hosts are %s", quote(w), strings.Join(hosts, ", ")), sugg
}

func (p *parser) target(c *Command, w string) (string, string) {
	if prob := badName(w, "host or service"); prob != "" {
		return prob, ""
	}
	if s := p.findService(w); s != nil {
		c.Service, c.Host = s.Name, s.Host
		return "", ""
	}
	if h := p.findHost(w); h != "" {
		var on []string
		var only *ServiceRef
		for i := range p.opts.Services {
			if p.opts.Services[i].Host == h {
				on = append(on, p.opts.Services[i].Name)
				only = &p.opts.Services[i]
			}
		}
		switch len(on) {
		case 1:
			c.Service, c.Host = only.Name, only.Host
			return "", ""
		case 0:
			return fmt.Sprintf("host %s runs no configured service: %s needs a service to stop and start", h, c.Spec.Path), ""
		}
		return fmt.Sprintf("host %s runs several services (%s): name one", h, strings.Join(on, ", ")),
			"for example `" + c.Spec.Path + " " + on[0] + "`"
	}
	cands := append(p.serviceNames(), p.knownHosts()...)
	sugg := ""
	if m := closest(w, cands); m != "" {
		sugg = didYouMean(c.Spec.Path + " " + m)
	}
	return fmt.Sprintf("unknown host or service %s: the services are %s", quote(w), strings.Join(p.serviceNames(), ", ")), sugg
}

func (p *parser) defaultService(c *Command) (string, string) {
	if d := p.opts.DefaultService; d != "" {
		if s := p.findService(d); s != nil {
			c.Service, c.Host = s.Name, s.Host
			return "", ""
		}
	}
	switch len(p.opts.Services) {
	case 1:
		c.Service, c.Host = p.opts.Services[0].Name, p.opts.Services[0].Host
		return "", ""
	case 0:
		return fmt.Sprintf("%s needs a service, and no services are configured", c.Spec.Path), ""
	}
	names := p.serviceNames()
	ex := *c
	ex.Service, ex.Host = names[0], p.opts.Services[0].Host
	return fmt.Sprintf("which service? %d are configured: %s", len(names), strings.Join(names, ", ")),
		"name one, for example `" + render(&ex) + "`, or set default_service in the config"
}

// defaultHost: the only GPU host (service host), else "" for all of them.
func (p *parser) defaultHost() string {
	var h string
	for _, s := range p.opts.Services {
		if h == "" {
			h = s.Host
		} else if h != s.Host {
			return ""
		}
	}
	if h == "" && len(p.opts.Hosts) == 1 {
		h = p.opts.Hosts[0]
	}
	return h
}

func (p *parser) trailing(c *Command, toks []token, i int, serviceGiven bool) (string, string) {
	w := toks[i].s
	spec := c.Spec
	prob := fmt.Sprintf("unexpected %s after `%s`", quote(w), replaceWord(toks[:i], -1, ""))
	if isDigits(w) && len(spec.keys) > 0 {
		return prob, didYouMean(replaceWord(toks, i, spec.keys[0].name+"="+w))
	}
	if p.findService(w) != nil {
		for j, pr := range spec.params {
			if pr.kind == pService && !serviceGiven {
				// the service came in the wrong place: move it to where it belongs
				return prob, didYouMean(moveWord(toks, i, j+pathWords(spec)))
			}
		}
		if serviceGiven {
			return prob + ": one service per command", ""
		}
	}
	return prob, ""
}

func pathWords(s *Spec) int { return strings.Count(s.Path, " ") + 1 }

func (p *parser) topic(c *Command, toks []token) (string, string) {
	words := make([]string, 0, 2)
	for _, t := range toks {
		w := strings.ToLower(t.s)
		if len(words) == 0 {
			w = strings.TrimLeft(w, "/!")
		}
		if w == "" {
			continue
		}
		words = append(words, w)
	}
	topic := strings.Join(words, " ")
	if topic == "" {
		return "", ""
	}
	if err := checkTopic(topic); err != nil {
		var ue *UsageError
		if errors.As(err, &ue) {
			return ue.Problem, ue.Suggestion
		}
		return err.Error(), ""
	}
	c.Topic = topic
	return "", ""
}

// parseSub parses the scheduled command of schedule add.
func (p *parser) parseSub(toks []token) (*Command, error) {
	sub, err := p.parse(toks, true)
	if err != nil {
		var ue *UsageError
		if errors.As(err, &ue) {
			ue2 := *ue
			ue2.Problem = "in the scheduled command: " + ue.Problem
			return nil, &ue2
		}
		return nil, err
	}
	add := Lookup("schedule add")
	if !sub.Spec.Schedulable {
		return nil, usageErr(add, fmt.Sprintf("%s cannot be scheduled: only %s can", sub.Spec.Path, schedulableList()), "")
	}
	if sub.DryRun {
		return nil, usageErr(add, "a scheduled command cannot be a dry run", "to preview the schedule put --dry-run before the cron spec: `schedule add --dry-run \"...\" "+sub.Spec.Path+" ...`")
	}
	return sub, nil
}

func schedulableList() string {
	var names []string
	for _, s := range registry {
		if s.Schedulable {
			names = append(names, s.Path)
		}
	}
	return orList(names)
}

// nameOr is "NAME " for a service name, "" for none.
func nameOr(service string) string {
	if service == "" {
		return ""
	}
	return service + " "
}

// parseLoadTable parses mtp per-load's TABLE: "1:7,8:6,64:2/3" (commas or
// the spaces between words), concurrencies rising, steps 0..maxSteps, the
// first entry's steps at least 1.
func parseLoadTable(s string, maxSteps int) ([]LoadSteps, string) {
	var out []LoadSteps
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		cs, ss, ok := strings.Cut(part, ":")
		if !ok || !isDigits(cs) || ss == "" {
			return nil, fmt.Sprintf("%s is not concurrency:steps (e.g. 8:6, or 64:2/3 for candidates)", quote(part))
		}
		c, prob := parseInt(cs, keyConcurrency.min, keyConcurrency.max, "the concurrency")
		if prob != "" {
			return nil, prob
		}
		if len(out) > 0 && c <= out[len(out)-1].Concurrency {
			return nil, fmt.Sprintf("concurrencies must rise, each once: %d after %d", c, out[len(out)-1].Concurrency)
		}
		e := LoadSteps{Concurrency: c}
		for _, w := range strings.Split(ss, "/") {
			if !isDigits(w) {
				return nil, fmt.Sprintf("steps %s at concurrency %d: want a number 0..%d", quote(w), c, maxSteps)
			}
			n, prob := parseInt(w, 0, maxSteps, "steps")
			if prob != "" {
				return nil, prob
			}
			if slices.Contains(e.Steps, n) {
				return nil, fmt.Sprintf("steps %d is given twice at concurrency %d", n, c)
			}
			e.Steps = append(e.Steps, n)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, "the table is empty: give concurrency:steps pairs, e.g. 1:10 8:7 32:1 64:1"
	}
	if out[0].Steps[0] < 1 {
		return nil, fmt.Sprintf("the engine starts with the first concurrency's steps: at least 1 at concurrency %d", out[0].Concurrency)
	}
	return out, ""
}
