package commands

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// An arg binds one argument of a command to a field of the command's value.
// A command type's args method returns its binding in usage order: the
// positional arguments, then its key=N arguments, then its flags (see
// bind). Each kind below knows its own usage, help, parsing and rendering,
// so a new command is its type and its binding, nothing else.
type arg interface {
	// usage is the argument in the usage line: "N", "[SERVICE]", "[lines=N]".
	usage() string
	// help is the argument's row in `help COMMAND`: its name and what it is;
	// name "" for none.
	help() (name, text string)
}

// positional is an argument found by its place (or by its leading word).
type positional interface {
	arg
	// optional reports whether the argument may be left out.
	optional() bool
	// parse reads the argument at toks[i] (and the words after it that
	// belong to it); it returns the index of the last word it took, or a
	// problem and a suggestion.
	parse(cp *cmdParse, toks []token, i int) (last int, problem, suggestion string)
	// fill resolves the argument when it was left out (optional ones).
	fill(cp *cmdParse) (problem, suggestion string)
	// render writes the argument as canonical text, with a leading space.
	render(b *strings.Builder)
	// missing says that a required argument is missing.
	missing(path string) string
}

// worded is a positional led by its word (`at 1,8`, `topk 2,4`), which may
// come anywhere after the command's path, once.
type worded interface {
	positional
	word() string
}

// noFill is embedded by positionals with nothing to resolve when left out.
type noFill struct{}

func (noFill) fill(*cmdParse) (string, string) { return "", "" }

// required is embedded by positionals that may not be left out.
type required struct{ noFill }

func (required) optional() bool { return false }

// stepsArg is N: speculative steps, 0 (speculative decoding off) to the steps limit.
type stepsArg struct {
	required
	v *int
}

func (stepsArg) usage() string { return "N" }
func (stepsArg) help() (string, string) {
	return "N", fmt.Sprintf("speculative decoding steps, 0..%d (the config may allow more); 0 takes speculative decoding off (`mtp undo` puts it back)", DefaultMaxSteps)
}
func (stepsArg) missing(path string) string {
	return path + " needs N, the number of speculative steps"
}
func (a stepsArg) render(b *strings.Builder) { writeInt(b, " ", int64(*a.v)) }
func (a stepsArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	max := cp.p.opts.maxSteps()
	v, prob := parseInt(w, 0, max, "steps")
	if prob != "" {
		sugg := ""
		if !isDigits(w) && i+1 < len(toks) && isDigits(toks[i+1].s) {
			sugg = didYouMean(moveWord(toks, i+1, i))
		} else if isDigits(w) && len(w) <= 9 && atoi(w) > max {
			sugg = stepsLimitHint(max)
		}
		return i, prob, sugg
	}
	*a.v = v
	return i, "", ""
}

// serviceArg is [SERVICE]: a configured service; left out, the default one.
type serviceArg struct{ on *On }

func (serviceArg) usage() string  { return "[SERVICE]" }
func (serviceArg) optional() bool { return true }
func (serviceArg) help() (string, string) {
	return "SERVICE", "a configured service, or a replica as SERVICE@REPLICA; may be left out when there is only one or a default_service"
}
func (serviceArg) missing(path string) string { return path + " needs [SERVICE]" }
func (a serviceArg) where() On                { return *a.on }
func (a serviceArg) render(b *strings.Builder) {
	if a.on.Service != "" {
		b.WriteByte(' ')
		b.WriteString(a.on.Service)
	}
}
func (a serviceArg) fill(cp *cmdParse) (string, string) { return cp.defaultService(a.on) }
func (a serviceArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if prob := badName(w, "service"); prob != "" {
		return i, prob, ""
	}
	if s := cp.p.findService(w); s != nil {
		a.on.Service, a.on.Host = s.Name, s.Host
		cp.serviceGiven = true
		return i, "", ""
	}
	if g, reps := cp.p.findReplicated(w); g != "" {
		cp.serviceGiven = true
		prob, sugg := cp.onGroup(a.on, g, reps, replaceWord(toks, i, reps[0]))
		return i, prob, sugg
	}
	if isDigits(w) && len(cp.b.keys) > 0 {
		k := cp.b.keys[0].k.name
		return i, fmt.Sprintf("unexpected number %s", w), didYouMean(replaceWord(toks, i, k+"="+w))
	}
	prob, sugg := cp.p.unknownService(w, toks, i)
	return i, prob, sugg
}

// hostArg is [HOST]: a configured host, or a service meaning its host; left
// out, the only GPU host, or "" for all of them.
type hostArg struct{ on *On }

func (hostArg) usage() string  { return "[HOST]" }
func (hostArg) optional() bool { return true }
func (hostArg) help() (string, string) {
	return "HOST", "a configured host (or a service, meaning its host); all GPU hosts when left out"
}
func (hostArg) missing(path string) string { return path + " needs [HOST]" }
func (a hostArg) where() On                { return *a.on }
func (a hostArg) render(b *strings.Builder) {
	if a.on.Host != "" {
		b.WriteByte(' ')
		b.WriteString(a.on.Host)
	}
}
func (a hostArg) fill(cp *cmdParse) (string, string) {
	a.on.Host = cp.p.defaultHost()
	return "", ""
}
func (a hostArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if prob := badName(w, "host"); prob != "" {
		return i, prob, ""
	}
	if h := cp.p.findHost(w); h != "" {
		a.on.Host = h
		return i, "", ""
	}
	if s := cp.p.findService(w); s != nil {
		a.on.Host = s.Host
		return i, "", ""
	}
	if g, reps := cp.p.findReplicated(w); g != "" {
		prob, sugg := cp.onGroup(a.on, g, reps, replaceWord(toks, i, reps[0]))
		return i, prob, sugg
	}
	hosts := cp.p.knownHosts()
	sugg := ""
	if m := closest(w, append(hosts, cp.p.serviceNames()...)); m != "" {
		sugg = didYouMean(cp.spec.Path + " " + m)
	}
	if len(hosts) == 0 {
		return i, fmt.Sprintf("unknown host %s: no hosts are configured", quote(w)), sugg
	}
	return i, fmt.Sprintf("unknown host %s: the hosts are %s", quote(w), strings.Join(hosts, ", ")), sugg
}

// targetArg is [HOST|SERVICE]: a service, or a host running exactly one.
type targetArg struct{ on *On }

func (targetArg) usage() string  { return "[HOST|SERVICE]" }
func (targetArg) optional() bool { return true }
func (targetArg) help() (string, string) {
	return "HOST|SERVICE", "a service, or a host running exactly one service; may be left out when there is only one service or a default_service"
}
func (targetArg) missing(path string) string           { return path + " needs [HOST|SERVICE]" }
func (a targetArg) where() On                          { return *a.on }
func (a targetArg) render(b *strings.Builder)          { serviceArg(a).render(b) }
func (a targetArg) fill(cp *cmdParse) (string, string) { return cp.defaultService(a.on) }
func (a targetArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	cp.serviceGiven = true
	w := toks[i].s
	p := cp.p
	if prob := badName(w, "host or service"); prob != "" {
		return i, prob, ""
	}
	if s := p.findService(w); s != nil {
		a.on.Service, a.on.Host = s.Name, s.Host
		return i, "", ""
	}
	if g, reps := p.findReplicated(w); g != "" {
		prob, sugg := cp.onGroup(a.on, g, reps, replaceWord(toks, i, reps[0]))
		return i, prob, sugg
	}
	path := cp.spec.Path
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
			a.on.Service, a.on.Host = only.Name, only.Host
			return i, "", ""
		case 0:
			return i, fmt.Sprintf("host %s runs no configured service: %s needs a service to stop and start", h, path), ""
		}
		return i, fmt.Sprintf("host %s runs several services (%s): name one", h, strings.Join(on, ", ")),
			"for example `" + path + " " + on[0] + "`"
	}
	cands := append(p.serviceNames(), p.knownHosts()...)
	sugg := ""
	if m := closest(w, cands); m != "" {
		sugg = didYouMean(path + " " + m)
	}
	return i, fmt.Sprintf("unknown host or service %s: the services are %s", quote(w), strings.Join(p.serviceNames(), ", ")), sugg
}

// literalArg is a required literal word (sweep's "steps").
type literalArg struct {
	required
	lit string
}

func (a literalArg) usage() string             { return a.lit }
func (literalArg) help() (string, string)      { return "", "" }
func (literalArg) missing(path string) string  { return path + " needs steps LIST, e.g. steps 1..5,10" }
func (a literalArg) render(b *strings.Builder) { b.WriteByte(' '); b.WriteString(a.lit) }
func (a literalArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if strings.EqualFold(w, a.lit) {
		return i, "", ""
	}
	sugg := ""
	if strings.ContainsAny(w, ",.") || isDigits(w) {
		sugg = didYouMean(replaceWord(toks, i, a.lit+" "+w))
	} else if closest(w, []string{a.lit}) != "" {
		sugg = didYouMean(replaceWord(toks, i, a.lit))
	}
	return i, fmt.Sprintf("expected %q, got %s", a.lit, quote(w)), sugg
}

// stepListArg is sweep's LIST: 1,2,3 or 1..5 or 1..5,10.
type stepListArg struct {
	required
	v *[]int
}

func (stepListArg) usage() string { return "LIST" }
func (stepListArg) help() (string, string) {
	return "LIST", fmt.Sprintf("values and ranges: 1,2,3 or 1..5 or 0..5,10 (at most %d, no value twice; 0 is speculative decoding off)", MaxSweepPoints)
}
func (stepListArg) missing(path string) string { return path + " needs steps LIST, e.g. steps 1..5,10" }
func (a stepListArg) render(b *strings.Builder) {
	b.WriteByte(' ')
	b.WriteString(formatList(*a.v))
}
func (a stepListArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	j, list := joinList(toks, i, toks[i].s)
	vals, prob, sugg := parseStepList(list, cp.p.opts.maxSteps())
	if prob != "" {
		return j, prob, orLimitHint(sugg, prob, cp.p.opts.maxSteps())
	}
	*a.v = vals
	return j, "", ""
}

// joinList joins the words from toks[i] that belong to one list (`1, 2, 3`
// or `1 .. 5`), the first given as first; it returns the last index taken.
func joinList(toks []token, i int, first string) (int, string) {
	j, list := i, first
	for j+1 < len(toks) && !toks[j+1].quoted && listJoins(toks[j].s, toks[j+1].s) {
		j++
		list += toks[j].s
	}
	return j, list
}

// gridListArg is sweep's [topk LIST] or [draft LIST].
type gridListArg struct {
	noFill
	lead     string // "topk" or "draft"
	lo, hi   int
	what     string // "each topk"
	helpText string
	v        *[]int
}

func (a gridListArg) word() string               { return a.lead }
func (a gridListArg) usage() string              { return "[" + a.lead + " LIST]" }
func (gridListArg) optional() bool               { return true }
func (a gridListArg) help() (string, string)     { return a.lead + " LIST", a.helpText }
func (a gridListArg) missing(path string) string { return path + " needs " + a.usage() }
func (a gridListArg) render(b *strings.Builder) {
	if len(*a.v) > 0 {
		b.WriteString(" " + a.lead + " ")
		b.WriteString(formatList(*a.v))
	}
}
func (a gridListArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	j, list, prob, sugg := cp.wordList(a.lead, "a list", toks, i)
	if prob != "" {
		return j, prob, sugg
	}
	vals, prob := parseIntList(list, a.lo, a.hi, a.what, a.lead)
	if prob != "" {
		return j, prob, ""
	}
	*a.v = vals
	return j, "", ""
}

var (
	topKHelp  = fmt.Sprintf("SGLang topk values to cross with the steps, 1..%d (default: the unit's)", MaxTopK)
	draftHelp = fmt.Sprintf("draft token counts for each topk above 1, 2..%d (default: the unit's; with topk 1 they are steps+1)", MaxDraftTokens)
)

func topKList(v *[]int) gridListArg {
	return gridListArg{lead: "topk", lo: 1, hi: MaxTopK, what: "each topk", helpText: topKHelp, v: v}
}

func draftList(v *[]int) gridListArg {
	return gridListArg{lead: "draft", lo: 2, hi: MaxDraftTokens, what: "each draft token count", helpText: draftHelp, v: v}
}

// atListArg is sweep's [at LIST]: the concurrencies to benchmark at.
type atListArg struct {
	noFill
	v *[]int
}

func (atListArg) word() string   { return "at" }
func (atListArg) usage() string  { return "[at LIST]" }
func (atListArg) optional() bool { return true }
func (atListArg) help() (string, string) {
	return "at LIST", fmt.Sprintf("concurrencies to benchmark each point at: 1,8,32 or 1..4 (at most %d; default: the configured one)", MaxSweepConcurrencies)
}
func (atListArg) missing(path string) string { return path + " needs [at LIST]" }
func (a atListArg) render(b *strings.Builder) {
	if len(*a.v) > 0 {
		b.WriteString(" at ")
		b.WriteString(formatList(*a.v))
	}
}
func (a atListArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	j, list, prob, sugg := cp.wordList("at", "a concurrency", toks, i)
	if prob != "" {
		return j, prob, sugg
	}
	vals, prob := parseConcList(list)
	if prob != "" {
		return j, prob, ""
	}
	*a.v = vals
	return j, "", ""
}

// atArg is mtp tune's [at N|LIST]: one concurrency, or with per-load two or
// more (MTPTune.check settles which).
type atArg struct {
	noFill
	conc *int
	list *[]int
	per  *bool
}

func (atArg) word() string   { return "at" }
func (atArg) usage() string  { return "[at N|LIST]" }
func (atArg) optional() bool { return true }
func (atArg) help() (string, string) {
	return "at N|LIST", "the concurrency to benchmark at, 1..1024 (default: the configured one); with per-load a list of two or more: 1,8,32,64"
}
func (atArg) missing(path string) string { return path + " needs [at N|LIST]" }
func (a atArg) render(b *strings.Builder) {
	if *a.per && len(*a.list) > 0 {
		b.WriteString(" at ")
		b.WriteString(formatList(*a.list))
	} else if *a.conc > 0 {
		writeInt(b, " at ", int64(*a.conc))
	}
}
func (a atArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	j, list, prob, sugg := cp.wordList("at", "a concurrency", toks, i)
	if prob != "" {
		return j, prob, sugg
	}
	if !strings.ContainsAny(list, ",.") {
		v, prob := parseInt(list, keyConcurrency.min, keyConcurrency.max, "the concurrency")
		if prob != "" {
			return j, prob, ""
		}
		*a.conc, *a.list = v, []int{v}
		return j, "", ""
	}
	vals, prob := parseConcList(list)
	if prob != "" {
		return j, prob, ""
	}
	*a.list = vals
	return j, "", ""
}

// wordArg is a bare word that may come anywhere after the command's path,
// once, and sets a flag (mtp tune's per-load and compare).
type wordArg struct {
	noFill
	w, helpText string
	v           *bool
}

// The bare words of mtp tune and mtp per-load.
const (
	perLoadWord  = "per-load"
	compareWord  = "compare"
	skipZeroWord = "skip-zero-extend"
)

func skipZeroArg(v *bool) wordArg {
	return wordArg{w: skipZeroWord, v: v, helpText: "SGLang: set SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in the unit (an Environment= line), so that a slot " +
		"holding only 0 skips the draft model's extend at each step (a stream drafting again afterwards starts from a cold draft state); " +
		"only with such a slot, as `mtp tune ... per-load` proposes it when it measured the table faster with it"}
}

func perLoadArg(v *bool) wordArg {
	return wordArg{w: perLoadWord, v: v, helpText: "find the best steps at each concurrency of the at LIST, start the engine's per-load configuration of them, measure it at every concurrency and propose it"}
}

func compareArg(v *bool) wordArg {
	return wordArg{w: compareWord, v: v, helpText: "with per-load: measure beside the proposal what would run otherwise, at the same concurrencies: SGLang's own default adaptive table and no speculation (vLLM: no speculation and the best single k)"}
}

func (a wordArg) usage() string              { return "[" + a.w + "]" }
func (wordArg) optional() bool               { return true }
func (a wordArg) help() (string, string)     { return a.w, a.helpText }
func (a wordArg) missing(path string) string { return path + " needs [" + a.w + "]" }
func (a wordArg) render(b *strings.Builder) {
	if *a.v {
		b.WriteString(" " + a.w)
	}
}

// parse is never reached through the places: the word is taken wherever it
// comes (cmdParse.word).
func (a wordArg) parse(_ *cmdParse, toks []token, i int) (int, string, string) {
	return i, fmt.Sprintf("unexpected %s", quote(toks[i].s)), ""
}

// rangeArg is mtp tune's [RANGE]: a..b.
type rangeArg struct{ from, to *int }

func (rangeArg) usage() string  { return "[RANGE]" }
func (rangeArg) optional() bool { return true }
func (rangeArg) help() (string, string) {
	return "RANGE", fmt.Sprintf("the steps values to search: a..b (default 1..%d; 0 is speculative decoding off, which a per-load tune measures whatever the range)", DefaultTuneTo)
}
func (rangeArg) missing(path string) string { return path + " needs [RANGE]" }
func (a rangeArg) render(b *strings.Builder) {
	writeInt(b, " ", int64(*a.from))
	writeInt(b, "..", int64(*a.to))
}
func (a rangeArg) fill(cp *cmdParse) (string, string) {
	*a.from, *a.to = 1, min(DefaultTuneTo, cp.p.opts.maxSteps())
	return "", ""
}
func (a rangeArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	j, rng := joinList(toks, i, toks[i].s)
	from, to, prob, sugg := parseRange(rng, cp.p.opts.maxSteps())
	if prob != "" {
		return j, prob, orLimitHint(sugg, prob, cp.p.opts.maxSteps())
	}
	*a.from, *a.to = from, to
	return j, "", ""
}

// loadTableArg is mtp per-load's TABLE: concurrency:steps pairs.
type loadTableArg struct {
	required
	v *[]LoadSteps
}

func (loadTableArg) usage() string { return "TABLE" }
func (loadTableArg) help() (string, string) {
	return "TABLE", "concurrency:steps pairs, concurrencies rising: 1:10 8:7 32:1 64:0; more steps after a slash (64:2/3, 8:6/0) are candidates the engine may move between; 0 is no speculation at that load (at least one value above 0: all 0 is `mtp steps 0`)"
}
func (loadTableArg) missing(path string) string { return path + " needs TABLE" }
func (a loadTableArg) render(b *strings.Builder) {
	for _, e := range *a.v {
		b.WriteByte(' ')
		b.WriteString(formatLoadSteps(e))
	}
}
func (a loadTableArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	j := i
	words := []string{toks[i].s}
	for j+1 < len(toks) && !toks[j+1].quoted && !strings.HasPrefix(toks[j+1].s, "-") && strings.Contains(toks[j+1].s, ":") {
		j++
		words = append(words, toks[j].s)
	}
	tab, prob := parseLoadTable(strings.Join(words, ","), cp.p.opts.maxSteps())
	if prob != "" {
		return j, prob, orLimitHint("for example `"+cp.spec.Examples[0]+"`", prob, cp.p.opts.maxSteps())
	}
	*a.v = tab
	return j, "", ""
}

// allArg is jobs' [all].
type allArg struct {
	noFill
	v *bool
}

func (allArg) usage() string              { return "[all]" }
func (allArg) optional() bool             { return true }
func (allArg) help() (string, string)     { return "all", "include finished jobs" }
func (allArg) missing(path string) string { return path + " needs [all]" }
func (a allArg) render(b *strings.Builder) {
	if *a.v {
		b.WriteString(" all")
	}
}
func (a allArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if !strings.EqualFold(w, "all") {
		sugg := ""
		if closest(w, []string{"all"}) != "" {
			sugg = didYouMean(replaceWord(toks, i, "all"))
		}
		return i, fmt.Sprintf("unexpected %s: %s takes only the word all", quote(w), cp.spec.Path), sugg
	}
	*a.v = true
	return i, "", ""
}

// idArg is a number naming a job, a schedule or an incident: 42 or #42.
type idArg struct {
	required
	kind *idKind
	v    *int64
}

// idKind is what an idArg names, in its words.
type idKind struct {
	usage, what, suggestion, missing, help string
}

var (
	jobID      = idKind{"JOB", "the job id", "", " needs a JOB id (`jobs` lists them)", "a job id: 42 or #42 (`jobs` lists them)"}
	scheduleID = idKind{"ID", "the schedule id", "`schedule list` shows the ids", " needs a schedule ID (`schedule list` shows them)", "a schedule id: 3 or #3 (`schedule list` shows them)"}
	incidentID = idKind{"INCIDENT", "the incident number", "the alert shows it: incident #7", " needs the INCIDENT number the alert shows", "the number a watchdog alert shows: 7 or #7"}
)

func (a idArg) usage() string              { return a.kind.usage }
func (a idArg) help() (string, string)     { return a.kind.usage, a.kind.help }
func (a idArg) missing(path string) string { return path + a.kind.missing }
func (a idArg) render(b *strings.Builder)  { writeInt(b, " ", *a.v) }
func (a idArg) parse(_ *cmdParse, toks []token, i int) (int, string, string) {
	v, prob := parseID(toks[i].s, a.kind.what)
	if prob != "" {
		return i, prob, a.kind.suggestion
	}
	*a.v = v
	return i, "", ""
}

// durationArg is watchdog silence's DURATION.
type durationArg struct {
	required
	v *time.Duration
}

func (durationArg) usage() string              { return "DURATION" }
func (durationArg) help() (string, string)     { return "DURATION", "how long: 30m, 2h, 1d (at most 7d)" }
func (durationArg) missing(path string) string { return path + " needs a DURATION, e.g. 2h" }
func (a durationArg) render(b *strings.Builder) {
	b.WriteByte(' ')
	b.WriteString(formatDuration(*a.v))
}
func (a durationArg) parse(_ *cmdParse, toks []token, i int) (int, string, string) {
	d, prob := ParseDuration(toks[i].s)
	if prob != "" {
		return i, prob, ""
	}
	*a.v = d
	return i, "", ""
}

// cronArg is schedule add's "CRON": quoted, or a bare @descriptor.
type cronArg struct {
	required
	v *string
}

func (cronArg) usage() string { return `"CRON"` }
func (cronArg) help() (string, string) {
	return `"CRON"`, `in quotes: "0 3 * * *", "@daily", "@every 6h", "CRON_TZ=Europe/Berlin 0 3 * * *"`
}
func (cronArg) missing(path string) string { return path + ` needs a "CRON" spec in quotes` }
func (a cronArg) render(b *strings.Builder) {
	b.WriteString(` "`)
	b.WriteString(*a.v)
	b.WriteByte('"')
}

// parseQuoted takes a quoted cron spec.
func (a cronArg) parseQuoted(cp *cmdParse, s string) (string, string) {
	canon, err := ValidateCron(s)
	if err != nil {
		return err.Error(), "for example " + "`" + cp.spec.Examples[0] + "`"
	}
	*a.v = canon
	return "", ""
}

func (a cronArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if strings.HasPrefix(w, "@") && !strings.ContainsAny(w, "*") {
		cs := w
		if strings.EqualFold(w, "@every") && i+1 < len(toks) && !toks[i+1].quoted {
			i++
			cs += " " + toks[i].s
		}
		canon, err := ValidateCron(cs)
		if err != nil {
			return i, err.Error(), ""
		}
		*a.v = canon
		return i, "", ""
	}
	sugg := ""
	if len(toks)-i > 5 {
		var b strings.Builder
		b.WriteString(cp.spec.Path)
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
	return i, fmt.Sprintf("the cron spec must be in quotes, got %s", quote(w)), sugg
}

// subArg is schedule add's COMMAND...: the rest, a schedulable job command.
type subArg struct {
	required
	v *Command
}

func (subArg) usage() string { return "COMMAND..." }
func (subArg) help() (string, string) {
	return "COMMAND...", "the job command to run: " + SchedulableList()
}
func (subArg) missing(path string) string { return path + " needs the COMMAND to run" }
func (a subArg) render(b *strings.Builder) {
	if *a.v != nil {
		b.WriteByte(' ')
		b.WriteString(render(*a.v))
	}
}

// parse takes every word left: the caller stops after it.
func (a subArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	sub, err := cp.p.parseSub(toks[i:])
	if err != nil {
		cp.subErr = err
		return len(toks) - 1, "", ""
	}
	*a.v = sub
	return len(toks) - 1, "", ""
}

// topicArg is help's [COMMAND]: a group or a path.
type topicArg struct {
	noFill
	v *string
}

func (topicArg) usage() string  { return "[COMMAND]" }
func (topicArg) optional() bool { return true }
func (topicArg) help() (string, string) {
	return "COMMAND", "a command or group: " + strings.Join(groups, ", ")
}
func (topicArg) missing(path string) string { return path + " needs [COMMAND]" }
func (a topicArg) render(b *strings.Builder) {
	if *a.v != "" {
		b.WriteByte(' ')
		b.WriteString(*a.v)
	}
}
func (a topicArg) parse(_ *cmdParse, toks []token, i int) (int, string, string) {
	j := i
	for j+1 < len(toks) && !toks[j+1].quoted && !strings.HasPrefix(toks[j+1].s, "-") && !strings.Contains(toks[j+1].s, "=") {
		j++
	}
	words := make([]string, 0, 2)
	for _, t := range toks[i : j+1] {
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
		return j, "", ""
	}
	if err := checkTopic(topic); err != nil {
		return j, err.Problem, err.Suggestion
	}
	*a.v = topic
	return j, "", ""
}

// Constructors used by the command types' bindings.
func steps(v *int) positional             { return stepsArg{v: v} }
func service(on *On) positional           { return serviceArg{on: on} }
func hostOf(on *On) positional            { return hostArg{on: on} }
func target(on *On) positional            { return targetArg{on: on} }
func literal(w string) positional         { return literalArg{lit: w} }
func stepList(v *[]int) positional        { return stepListArg{v: v} }
func loadTable(v *[]LoadSteps) positional { return loadTableArg{v: v} }
func id(k *idKind, v *int64) positional   { return idArg{kind: k, v: v} }
func keyed(k *key, v *int) arg            { return keyArg{k: k, v: v} }
func flagOf(d *flagDef, v *bool) arg      { return &flagArg{def: d, v: v} }
func dryRun(v *bool) arg                  { return flagOf(&flagDryRun, v) }

func writeInt(b *strings.Builder, prefix string, v int64) {
	var num [20]byte
	b.WriteString(prefix)
	b.Write(strconv.AppendInt(num[:0], v, 10))
}

// binding is a command's args, sorted by kind.
type binding struct {
	params []positional
	keys   []keyArg
	flags  []*flagArg
	to     *toArg
	words  []wordArg
}

func bind(c Command) binding {
	var b binding
	for _, a := range c.args() {
		switch a := a.(type) {
		case positional:
			b.params = append(b.params, a)
			if w, ok := a.(wordArg); ok {
				b.words = append(b.words, w)
			}
		case keyArg:
			b.keys = append(b.keys, a)
		case *flagArg:
			b.flags = append(b.flags, a)
		case toArg:
			b.to = &a
		}
	}
	return b
}

// flagsFirst reports whether the command's flags come before its
// positionals (schedule add: the rest is the scheduled command).
func (b binding) flagsFirst() bool {
	if len(b.params) == 0 {
		return false
	}
	_, ok := b.params[len(b.params)-1].(subArg)
	return ok
}

// stepsLimitHint says which config key sets the steps limit max.
func stepsLimitHint(max int) string {
	return fmt.Sprintf("%d is the config's limits.max_steps: an admin can raise it there (at most 64)", max)
}

// orLimitHint is stepsLimitHint when prob is about a steps value above max
// ("... between 0 and 16, got 100"), else sugg.
func orLimitHint(sugg, prob string, max int) string {
	_, got, ok := strings.Cut(prob, fmt.Sprintf(" and %d, got ", max))
	if ok && isDigits(got) && len(got) <= 9 && atoi(got) > max {
		return stepsLimitHint(max)
	}
	return sugg
}
