package slack

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/opsbot/opsbot/bot"
)

// Block Kit limits (https://api.slack.com/reference/block-kit/blocks): a
// message holds at most 50 blocks, a section's text at most 3000 characters.
const (
	MaxBlocks   = 50
	MaxTextLen  = 3000
	maxFallback = 4000 // chat.postMessage's text, shown in notifications
)

// longOutput is the size from which a thread message goes into the thread as
// a file (logs, unit diffs) instead of as blocks: Slack folds long messages
// and a file keeps every line.
const longOutput = 2 * MaxTextLen

// kindLabel names each message kind in its context line.
var kindLabel = map[bot.Kind]string{
	bot.KindStatus: "job status",
	bot.KindStep:   "steps",
	bot.KindResult: "result",
	bot.KindNotice: "notice",
}

// renderMessage draws m as Block Kit blocks, plus the plain text Slack shows
// in notifications. The text comes from bot; this only lays it out: the text
// in sections of at most MaxTextLen characters (split at lines), a code block
// kept whole where it fits, the buttons of the actions it offers (the
// watchdog's Recover), and a context line naming the kind.
func renderMessage(m bot.Message) (blocks []slack.Block, fallback string) {
	for _, part := range splitText(m.Text, MaxTextLen) {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, part, false, false), nil, nil))
	}
	if len(blocks) > MaxBlocks-3 {
		blocks = blocks[:MaxBlocks-3]
	}
	blocks = append(blocks, actionBlocks(m.Actions, time.Now())...)
	if m.Kind == bot.KindStatus || m.Kind == bot.KindResult {
		label := "opsbot · " + kindLabel[m.Kind]
		if m.Final {
			label += " · final"
		}
		blocks = append(blocks, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, label, false, false)))
	}
	return blocks, truncate(firstLine(m.Text), maxFallback)
}

// renderReply draws a bot.Reply (an ephemeral answer, a preview with Confirm
// and Abort, an acknowledgement with Cancel): its text, then one button per
// action, each carrying the action's id back, and the expiry of the actions
// that have one.
func renderReply(r bot.Reply, now time.Time) []slack.Block {
	var blocks []slack.Block
	for _, part := range splitText(r.Text, MaxTextLen) {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, part, false, false), nil, nil))
	}
	if len(blocks) > MaxBlocks-2 {
		blocks = blocks[:MaxBlocks-2]
	}
	return append(blocks, actionBlocks(r.Actions, now)...)
}

// actionBlocks draws actions as one button each, carrying the action's id
// back on a click, and the earliest expiry among them; none for no actions.
func actionBlocks(actions []bot.Action, now time.Time) []slack.Block {
	if len(actions) == 0 {
		return nil
	}
	var buttons []slack.BlockElement
	var expires time.Time
	for _, a := range actions {
		b := slack.NewButtonBlockElement(a.ID, a.ID, slack.NewTextBlockObject(slack.PlainTextType, a.Label, false, false))
		switch a.Kind {
		case bot.ActConfirm, bot.ActApprove:
			b = b.WithStyle(slack.StylePrimary)
		case bot.ActAbort, bot.ActCancel, bot.ActReject:
			b = b.WithStyle(slack.StyleDanger)
		}
		buttons = append(buttons, b)
		if !a.Expires.IsZero() && (expires.IsZero() || a.Expires.Before(expires)) {
			expires = a.Expires
		}
	}
	blocks := []slack.Block{slack.NewActionBlock("opsbot_actions", buttons...)}
	if !expires.IsZero() {
		left := expires.Sub(now).Round(time.Second)
		blocks = append(blocks, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType,
			"expires "+expires.UTC().Format("15:04:05")+" UTC (in "+left.String()+")", false, false)))
	}
	return blocks
}

// splitText cuts text into parts of at most max characters, at line ends
// where it can, never inside a UTF-8 sequence. A ``` block cut in two is
// closed and reopened so each part renders.
func splitText(text string, max int) []string {
	if text == "" {
		return nil
	}
	var parts []string
	var cur strings.Builder
	inCode := false
	flush := func() {
		if cur.Len() == 0 {
			return
		}
		s := cur.String()
		if inCode {
			s += "\n```"
		}
		parts = append(parts, s)
		cur.Reset()
		if inCode {
			cur.WriteString("```\n")
		}
	}
	const fence = len("\n```") + len("```\n")
	for _, line := range strings.SplitAfter(text, "\n") {
		for utf8.RuneCountInString(line) > max-fence {
			cut := byteIndexOfRune(line, max-fence)
			if cur.Len() > 0 {
				flush()
			}
			cur.WriteString(line[:cut])
			flush()
			line = line[cut:]
		}
		if utf8.RuneCountInString(cur.String())+utf8.RuneCountInString(line)+fence > max {
			flush()
		}
		cur.WriteString(line)
		if strings.Count(line, "```")%2 == 1 {
			inCode = !inCode
		}
	}
	if cur.Len() > 0 {
		s := strings.TrimRight(cur.String(), "\n")
		if s != "" && s != "```" {
			parts = append(parts, s)
		}
	}
	for i, p := range parts {
		parts[i] = strings.TrimRight(p, "\n")
	}
	return parts
}

func byteIndexOfRune(s string, n int) int {
	i := 0
	for j := range s {
		if i == n {
			return j
		}
		i++
	}
	return len(s)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func truncate(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return s[:byteIndexOfRune(s, max-1)] + "…"
}

// outcomeReaction is the reaction a final status message gets, by its
// status ("" for none).
func outcomeReaction(s bot.Status) string {
	switch s {
	case bot.StatusSucceeded:
		return "white_check_mark"
	case bot.StatusFailed:
		return "x"
	case bot.StatusCancelled:
		return "no_entry_sign"
	case bot.StatusRefused:
		return "no_entry"
	case bot.StatusInterrupted:
		return "warning"
	}
	return ""
}
