// Package report is what chat shows of jobs and their results: a job's
// status line, its step lines and its result block (RenderStatus,
// RenderEvent, RenderResult), preformatted blocks (Pre, Plain) and times
// (Clock, Stamp). A sweep's or tune's result is reported as a table per
// concurrency, each point beside its previous result, and a PNG chart
// attached to the thread (SweepTables, SweepChart, named ChartName).
// CheckRegression judges a finished job's benchmarks, each setting in each
// concurrency bucket, by output tok/s and accept length against the median
// of their last comparable runs (compared by SettingsKey at the same LoadOf)
// and returns the alert to post; it posts nothing itself.
//
// It only draws: it sends nothing and runs nothing, so the door (bot) and
// the job runtime use it alike.
package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/chat"
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

// StatusIcon is the icon of a job's state.
func StatusIcon(s store.Status) string { return chat.Status(s).Icon() }

// RenderStatus draws the root status message of a job: one line that says what
// the job is, where it stands and, once final, how it ended.
func RenderStatus(v JobView, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d `%s` — %s", StatusIcon(v.Status), v.ID, v.Command, v.Status)
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

// Times in messages are UTC and say so: Clock for the time of day of a step,
// Stamp for a date and time (job lists, history, comparisons).
func Clock(t time.Time) string { return t.UTC().Format("15:04:05") + " UTC" }

// Stamp renders t as "2026-12-03 10:04 UTC".
func Stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04") + " UTC" }

// RenderEvent draws one thread line for a pipeline event, its time in UTC.
func RenderEvent(e ops.Event) string {
	icon := stepIcon[e.Status]
	if icon == "" {
		icon = "·"
	}
	msg := e.Message
	if msg == "" {
		msg = string(e.Status)
	}
	return fmt.Sprintf("%s %s %s: %s", Clock(e.At), icon, e.Step, msg)
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
	if v.Status != store.Succeeded && r.Left != nil {
		b.WriteString(RenderLeft(r.Left))
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

// RenderLeft draws the state a job left its service in and what helps next,
// for the final message of a job that did not succeed:
//
//	now: qwen is stopped; its unit has the new text (steps 6), not started
//	next: `svc start qwen` starts it (`mtp steps 3 qwen` puts steps 3 back)
//
// Each line starts with a newline.
func RenderLeft(l *ops.ServiceLeft) string {
	if l == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nnow: %s", l.Sentence())
	undo := ""
	if l.Undo != "" {
		undo = fmt.Sprintf("`%s` puts steps %d back", l.Undo, l.UndoSteps)
	}
	switch {
	case l.Advice != "":
		fmt.Fprintf(&b, "\nwhat helps: %s", l.Advice)
	case l.Next != "":
		fmt.Fprintf(&b, "\nnext: `%s` %s", l.Next, nextDoes(l.NextStep))
		if undo != "" {
			fmt.Fprintf(&b, " (%s)", undo)
		}
	case undo != "":
		fmt.Fprintf(&b, "\nnext: %s", undo)
	}
	return b.String()
}

// nextDoes says what the command that takes step does.
func nextDoes(step ops.NextStep) string {
	switch step {
	case ops.NextStart:
		return "starts it and waits until it serves"
	case ops.NextStatus:
		return "shows whether it serves"
	case ops.NextRecover:
		return "clears its GPUs and starts it"
	case ops.NextGPUs:
		return "shows who holds its GPUs"
	case ops.NextReset:
		return "(admin) releases persistence mode for exactly those GPUs, resets them, checks 0 MiB and no new Xid, puts persistence back and starts the enabled services on them again"
	}
	return "helps next"
}
