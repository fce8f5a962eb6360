package bot

import (
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// JobView is what the renderer needs to draw a job's status message.
type JobView struct {
	ID      int64
	Command string
	User    string
	Status  store.Status
	// Step is the step running now, with its latest message.
	Step, StepMessage string
	Steps             int // steps seen so far
	Started, Ended    time.Time
	Summary           string
	Error             string
}

var statusIcon = map[store.Status]string{
	store.Queued:      "⏳",
	store.Running:     "🔄",
	store.Succeeded:   "✅",
	store.Failed:      "❌",
	store.Cancelled:   "🚫",
	store.Refused:     "⛔",
	store.Interrupted: "⚠️",
}

// RenderStatus draws the root status message of a job: one line that says what
// the job is, where it stands and, once final, how it ended.
func RenderStatus(v JobView, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d `%s` — %s", statusIcon[v.Status], v.ID, v.Command, v.Status)
	switch v.Status {
	case store.Running:
		if !v.Started.IsZero() {
			fmt.Fprintf(&b, " for %s", roundDuration(now.Sub(v.Started)))
		}
		if v.Step != "" {
			fmt.Fprintf(&b, " · %s", v.Step)
			if v.StepMessage != "" {
				fmt.Fprintf(&b, ": %s", v.StepMessage)
			}
		}
	case store.Queued:
		if v.StepMessage != "" {
			fmt.Fprintf(&b, " · %s", v.StepMessage)
		}
	default:
		if !v.Started.IsZero() && !v.Ended.IsZero() {
			fmt.Fprintf(&b, " in %s", roundDuration(v.Ended.Sub(v.Started)))
		}
		if v.Summary != "" {
			fmt.Fprintf(&b, " · %s", v.Summary)
		}
		if v.Error != "" {
			fmt.Fprintf(&b, "\n%s", v.Error)
		}
	}
	if v.User != "" {
		fmt.Fprintf(&b, " · by %s", v.User)
	}
	return b.String()
}

var stepIcon = map[ops.StepStatus]string{
	ops.StepStarted:  "▶",
	ops.StepProgress: "…",
	ops.StepDone:     "✔",
	ops.StepFailed:   "✖",
	ops.StepSkipped:  "↷",
	ops.StepWarning:  "⚠",
}

// RenderEvent draws one thread line for a pipeline event. Times are shown in UTC.
func RenderEvent(e ops.Event) string {
	icon := stepIcon[e.Status]
	if icon == "" {
		icon = "·"
	}
	msg := e.Message
	if msg == "" {
		msg = string(e.Status)
	}
	return fmt.Sprintf("%s %s %s: %s", e.At.UTC().Format("15:04:05"), icon, e.Step, msg)
}

// RenderResult draws the final result block of a job: the summary, the incidents
// met on the way and any detail lines the pipeline produced.
func RenderResult(v JobView, r *ops.Result) string {
	var b strings.Builder
	switch v.Status {
	case store.Succeeded:
		fmt.Fprintf(&b, "*Result of #%d* `%s`", v.ID, v.Command)
	default:
		fmt.Fprintf(&b, "*#%d %s* `%s`", v.ID, v.Status, v.Command)
	}
	if v.Error != "" {
		fmt.Fprintf(&b, "\n%s", v.Error)
	}
	if r == nil {
		return b.String()
	}
	if r.Summary != "" {
		fmt.Fprintf(&b, "\n%s", r.Summary)
	}
	if len(r.Incidents) > 0 {
		fmt.Fprintf(&b, "\nincidents: %s", strings.Join(r.Incidents, ", "))
	}
	for _, d := range r.Details {
		if strings.Contains(strings.TrimRight(d, "\n"), "\n") {
			d = Pre(d) // a table or a diff: preformatted
		}
		fmt.Fprintf(&b, "\n%s", d)
	}
	if len(r.Logs) > 0 {
		fmt.Fprintf(&b, "\n%s", Pre(strings.Join(r.Logs, "\n")))
	}
	return b.String()
}

// fence opens and closes a preformatted block in a message's light markup.
const fence = "```"

// Pre marks text as one preformatted block (journal lines, a table) in a
// message's light markup: a fenced code block, which chats that have them
// show as one; a terminal prints it as it is (Plain). A fence inside text is
// broken up so the block cannot end early.
func Pre(text string) string {
	text = strings.ReplaceAll(strings.TrimRight(text, "\n"), fence, "`\u200b``")
	return fence + "\n" + text + "\n" + fence
}

// Plain returns a message's text for a terminal: every block Pre made
// without its fence lines; the rest unchanged.
func Plain(text string) string {
	if !strings.Contains(text, fence) {
		return text
	}
	lines := strings.Split(text, "\n")
	out := lines[:0]
	for _, l := range lines {
		if l != fence {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Second)
	}
}
