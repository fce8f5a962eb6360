package jobs

import (
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// interruptedWhy is the error a job of a dead opsbot process is recorded
// interrupted with (store.InterruptUnfinished): store.InterruptedMessage,
// then what the store knows of how far it got (lastSeen).
func interruptedWhy(j store.Job, evs []store.Event) string {
	return store.InterruptedMessage + "; " + lastSeen(j, evs)
}

// lastSeen says, from a job's recorded events, the last step it recorded
// and what that means for its host, with the command that shows the host:
// "last seen: start: active (PID 13); the host may run the new unit:
// `svc status qwen`".
func lastSeen(j store.Job, evs []store.Event) string {
	if j.Status == store.Queued {
		return "it had not started, so its host was not changed"
	}
	seen := "no step of it was recorded"
	if len(evs) > 0 {
		last := evs[len(evs)-1]
		seen = "last seen: " + last.Step + ": " + excerpt(last.Message)
	}
	if c, err := commands.Decode(j.Args); err == nil && !commands.Mutates(c) {
		return seen + "; it changes nothing on its host"
	}
	oevs := make([]ops.Event, len(evs))
	for i, e := range evs {
		oevs[i] = ops.Event{At: e.At, Step: e.Step, Status: ops.StepStatus(e.Status), Message: e.Message}
	}
	next := "svc status"
	if j.Service != "" {
		next = commands.Text(commands.NextCommand(ops.NextStatus, commands.On{Service: j.Service}))
	}
	if len(evs) == 0 {
		return seen + ", so the host may be mid-change: `" + next + "`"
	}
	return seen + "; " + ops.HostAfter(oevs) + ": `" + next + "`"
}

// excerpt is the first line of an event's message, at most 120 characters.
func excerpt(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > 120 {
		s = string(r[:119]) + "…"
	}
	return s
}

// interruptedNotice is what a dead process's job's room is told once it
// is recorded interrupted.
func interruptedNotice(j store.Job) string {
	detail := strings.TrimPrefix(j.Error, store.InterruptedMessage)
	detail = strings.TrimPrefix(detail, "; ")
	if detail == "" {
		detail = fmt.Sprintf("the host may be mid-change; check it with `svc status%s`", forService(j.Service))
	}
	return fmt.Sprintf("%s #%d `%s` was interrupted: the opsbot process running it stopped; %s.",
		report.StatusIcon(store.Interrupted), j.ID, j.Command, detail)
}
