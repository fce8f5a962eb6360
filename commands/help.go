package commands

import (
	"fmt"
	"slices"
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
	if slices.Contains(answerTopics, topic) {
		answerHelp(&b, topic)
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

func checkTopic(topic string) *UsageError {
	if topic == "" {
		return nil
	}
	if slices.Contains(topics(), topic) || slices.Contains(answerTopics, topic) {
		return nil
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

// answerTopics are the words that answer a question the bot asked rather
// than commands of their own (the door reads them: confirm TOKEN, y, yes);
// "approve" is what people try first. `help WORD` explains them.
var answerTopics = []string{"confirm", "approve", "y", "yes"}

// answerHelp is `help confirm` (and approve, y, yes): how a confirmation is
// answered, on every platform, and which commands ask for one.
func answerHelp(b *strings.Builder, topic string) {
	var asks []string
	for _, s := range registry {
		if s.Confirm {
			asks = append(asks, s.Path)
		}
	}
	b.WriteString("confirm TOKEN · y · yes\n\n")
	text := "Answer a question the bot asked: a command that asks for confirmation (" + strings.Join(asks, ", ") +
		", and a schedule of one of them) answers with a preview of what it will do and a token, and runs only once confirmed. " +
		"Confirm it with `confirm TOKEN` (the token the preview names, in the same room), or `y` / `yes` when it is the only " +
		"confirmation waiting for you in that room (with several, `y` confirms none and lists each with its `confirm TOKEN`). " +
		"In Slack, the preview's Confirm button; in Matrix, a ✅ reaction on it (❌ drops it). " +
		"In `opsbot run`, answer the prompt with y or the `confirm TOKEN` it names, or pass --yes. " +
		"Only the one who asked may confirm their command; the watchdog's offers may be confirmed by anyone with the role the command needs. " +
		"An unanswered confirmation expires (limits.confirm_ttl) and nothing runs."
	if topic == "approve" {
		text += " There is no `approve` command: `confirm TOKEN` or `y` is how to approve."
	}
	wrap(b, text, 96, "")
	b.WriteString("\n\nRole: the role of the command confirmed\n")
	b.WriteString("Examples:\n  confirm 3f9a0c1d2e4b5a6978c1d2e3f4a5b6c7\n  y\n")
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
	b.WriteString("Roles: viewer (read-only) < operator (changes hosts) < admin (schedules, gpu recover --force); the config may grant a role on some services only.\n")
	b.WriteString("`confirm TOKEN` answers a preview; a command the config makes wait for a second person runs once someone else types `approve TOKEN` (`reject TOKEN` drops it).\n")
	b.WriteString("Every command that changes something takes --dry-run: it shows what it would do and changes nothing.\n")
	b.WriteString("SERVICE may be left out when only one service is configured, or the config sets default_service.\n")
	b.WriteString("`confirm TOKEN` (or `y`) answers a command that asks for confirmation: `help confirm`.\n")
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
	if s.RoleNote != "" {
		b.WriteString(" (" + s.RoleNote + ")")
	}
	b.WriteByte('\n')
	if s.Mutating {
		b.WriteString("Changes things: yes (--dry-run previews)")
	} else {
		b.WriteString("Changes things: no")
	}
	if s.Confirm {
		b.WriteString(" · asks for confirmation: yes")
	} else if bind(s.new()).flagsFirst() { // schedule add
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
	if namesService(bind(s.new())) {
		b.WriteString("On a replicated service (qwen, not its replica qwen@gpu3): " + s.OnGroup.help() + "\n")
	}
	type row struct{ name, help string }
	var rows []row
	add := func(a arg) {
		if name, help := a.help(); name != "" {
			rows = append(rows, row{name, help})
		}
	}
	bd := bind(s.new())
	for _, p := range bd.params {
		add(p)
	}
	for _, k := range bd.keys {
		add(k)
	}
	if bd.to != nil {
		add(bd.to)
	}
	for _, f := range bd.flags {
		add(f)
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
