package commands

import (
	"fmt"
	"strings"
)

// Help renders help text from the registry. topic "" gives the overview (every
// command with its usage, summary and role); a group ("svc") or a path
// ("svc logs") gives each matching command's usage, description, arguments, role,
// whether it mutates, confirms and locks, and examples. Topic words are matched
// case-insensitively and a leading / or ! is ignored. An unknown topic returns a
// *UsageError with a did-you-mean.
func Help(topic string) (string, error) {
	topic = normalizeTopic(topic)
	if err := checkTopic(topic); err != nil {
		return "", err
	}
	var b strings.Builder
	if topic == "" {
		overview(&b)
		return b.String(), nil
	}
	specs := groupSpecs(topic)
	if len(specs) == 0 {
		specs = []*Spec{Lookup(topic)}
	}
	for i, s := range specs {
		if i > 0 {
			b.WriteString("\n")
		}
		detail(&b, s)
	}
	return b.String(), nil
}

func normalizeTopic(t string) string {
	t = normalize(t)
	f := strings.Fields(strings.ToLower(t))
	if len(f) > 0 {
		f[0] = strings.TrimLeft(f[0], "/!")
	}
	return strings.TrimSpace(strings.Join(f, " "))
}

// topics lists every valid help topic: groups, then paths.
func topics() []string {
	out := append([]string(nil), groups...)
	for _, s := range registry {
		if s.Path != s.Group() {
			out = append(out, s.Path)
		}
	}
	return out
}

func checkTopic(topic string) error {
	if topic == "" {
		return nil
	}
	for _, t := range topics() {
		if t == topic {
			return nil
		}
	}
	sugg := ""
	if m := closest(topic, topics()); m != "" {
		sugg = didYouMean("help " + m)
	} else if first, _, ok := strings.Cut(topic, " "); ok {
		for _, g := range groups {
			if g == first {
				sugg = didYouMean("help " + g)
			}
		}
	}
	return usageErr(Lookup("help"), fmt.Sprintf("no help for %s: not a command", quote(topic)), sugg)
}

func overview(b *strings.Builder) {
	b.WriteString("opsbot commands ([role needed]; `help COMMAND` explains one):\n")
	for _, s := range registry {
		fmt.Fprintf(b, "\n  %s\n      %s [%s]", s.Usage, s.Summary, s.Role)
	}
	b.WriteString("\n\nType them in a terminal as `mtp steps 10`, in Matrix as `!mtp steps 10`, in Slack as `/mtp steps 10`.\n")
	slash := SlashCommands()
	own := slash[:len(slash)-1]
	fmt.Fprintf(b, "In Slack, %s and %s are slash commands of their own; type the others after %s: `%s`, `%s`.\n",
		strings.Join(own[:len(own)-1], ", "), own[len(own)-1], SlackCatchAll, InSlack(Lookup("ack").Examples[0]), InSlack(Lookup("job").Examples[0]))
	b.WriteString("Roles: viewer (read-only) < operator (changes hosts) < admin (schedules, gpu recover --force).\n")
	b.WriteString("Every command that changes something takes --dry-run: it shows what it would do and changes nothing.\n")
	b.WriteString("SERVICE may be left out when only one service is configured, or the config sets default_service.\n")
}

func detail(b *strings.Builder, s *Spec) {
	b.WriteString(s.Usage)
	b.WriteString("\n\n")
	text := strings.ToUpper(s.Summary[:1]) + s.Summary[1:] + "."
	if s.Details != "" {
		text += " " + s.Details
	}
	wrap(b, text, 96, "")
	b.WriteString("\n\n")
	fmt.Fprintf(b, "Role: %s", s.Role)
	if s.Path == "gpu recover" {
		b.WriteString(" (admin with --force)")
	}
	b.WriteByte('\n')
	if s.Mutating {
		b.WriteString("Changes things: yes (--dry-run previews)")
	} else {
		b.WriteString("Changes things: no")
	}
	if s.Confirm {
		b.WriteString(" · asks for confirmation: yes")
	} else if len(s.params) > 0 && s.params[len(s.params)-1].kind == pSub {
		b.WriteString(" · asks for confirmation: when COMMAND does")
	} else {
		b.WriteString(" · asks for confirmation: no")
	}
	if s.Lock == LockService {
		b.WriteString(" · locks: the service")
	} else {
		b.WriteString(" · locks: nothing")
	}
	if s.Schedulable {
		b.WriteString(" · can be scheduled")
	}
	b.WriteString("\n")
	type row struct{ name, help string }
	var rows []row
	for _, p := range s.params {
		switch p.kind {
		case pSteps:
			rows = append(rows, row{"N", fmt.Sprintf("speculative decoding steps, 1..%d (the config may allow more)", DefaultMaxSteps)})
		case pService:
			rows = append(rows, row{"SERVICE", "a configured service; may be left out when there is only one or a default_service"})
		case pHost:
			rows = append(rows, row{"HOST", "a configured host (or a service, meaning its host); all GPU hosts when left out"})
		case pTarget:
			rows = append(rows, row{"HOST|SERVICE", "a service, or a host running exactly one service; may be left out when there is only one service or a default_service"})
		case pStepList:
			rows = append(rows, row{"LIST", fmt.Sprintf("values and ranges: 1,2,3 or 1..5 or 1..5,10 (at most %d, no value twice)", MaxSweepPoints)})
		case pTopKList:
			rows = append(rows, row{"topk LIST", fmt.Sprintf("SGLang topk values to cross with the steps, 1..%d (default: the unit's)", MaxTopK)})
		case pDraftList:
			rows = append(rows, row{"draft LIST", fmt.Sprintf("draft token counts for each topk above 1, 2..%d (default: the unit's; with topk 1 they are steps+1)", MaxDraftTokens)})
		case pAtList:
			rows = append(rows, row{"at LIST", fmt.Sprintf("concurrencies to benchmark each point at: 1,8,32 or 1..4 (at most %d; default: the configured one)", MaxSweepConcurrencies)})
		case pAt:
			rows = append(rows, row{"at N|LIST", "the concurrency to benchmark at, 1..1024 (default: the configured one); with per-load a list of two or more: 1,8,32,64"})
		case pLoadTable:
			rows = append(rows, row{"TABLE", "concurrency:steps pairs, concurrencies rising: 1:10 8:7 32:1 64:0; more steps after a slash (64:2/3) are candidates the engine may move between; the first concurrency's steps at least 1"})
		case pPerLoad:
			rows = append(rows, row{perLoadWord, "find the best steps at each concurrency of the at LIST and propose the engine's per-load configuration"})
		case pRange:
			rows = append(rows, row{"RANGE", fmt.Sprintf("the steps values to search: a..b (default 1..%d)", DefaultTuneTo)})
		case pAll:
			rows = append(rows, row{"all", "include finished jobs"})
		case pJobID:
			rows = append(rows, row{"JOB", "a job id: 42 or #42 (`jobs` lists them)"})
		case pScheduleID:
			rows = append(rows, row{"ID", "a schedule id: 3 or #3 (`schedule list` shows them)"})
		case pDuration:
			rows = append(rows, row{"DURATION", "how long: 30m, 2h, 1d (at most 7d)"})
		case pIncidentID:
			rows = append(rows, row{"INCIDENT", "the number a watchdog alert shows: 7 or #7"})
		case pCron:
			rows = append(rows, row{`"CRON"`, `in quotes: "0 3 * * *", "@daily", "@every 6h", "CRON_TZ=Europe/Berlin 0 3 * * *"`})
		case pSub:
			rows = append(rows, row{"COMMAND...", "the job command to run: " + schedulableList()})
		case pTopic:
			rows = append(rows, row{"COMMAND", "a command or group: " + strings.Join(groups, ", ")})
		}
	}
	for _, k := range s.keys {
		h := fmt.Sprintf("%s, %d..%d", k.help, k.min, k.max)
		if k.def != 0 {
			h += fmt.Sprintf(" (default %d)", k.def)
		} else {
			h += " (default: the configured one)"
		}
		rows = append(rows, row{k.name + "=N", h})
	}
	if s.targets {
		rows = append(rows, row{"--to TARGETS", "the rooms the runs report to, first one first: slack:C0OPS,matrix:!ops:example.org (default: this room)"})
	}
	for _, f := range flagNames {
		if s.flags&f.f != 0 {
			rows = append(rows, row{f.name, f.help})
		}
	}
	if len(rows) > 0 {
		w := 0
		for _, r := range rows {
			w = max(w, len(r.name))
		}
		b.WriteString("Arguments:\n")
		for _, r := range rows {
			fmt.Fprintf(b, "  %-*s  %s\n", w, r.name, r.help)
		}
	}
	b.WriteString("Examples:\n")
	for _, e := range s.Examples {
		fmt.Fprintf(b, "  %s\n", e)
	}
	fmt.Fprintf(b, "In Slack: `%s`\n", InSlack(s.Examples[0]))
}

// wrap writes text word-wrapped at width columns, each line prefixed by indent.
func wrap(b *strings.Builder, text string, width int, indent string) {
	col := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && col+1+len(w) > width {
			b.WriteString("\n")
			col = 0
		}
		if col == 0 {
			b.WriteString(indent)
			col = len(indent)
		} else {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
}
