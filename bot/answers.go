package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/store"
)

// answer handles the commands answered at once, without a job: help, jobs,
// history, cancel and the schedule commands. ok is false for job commands.
func (d *Dispatcher) answer(ctx context.Context, req Request, cmd *commands.Command) (Reply, bool) {
	say := func(format string, a ...any) (Reply, bool) {
		return Reply{Outcome: Answered, Text: fmt.Sprintf(format, a...), Command: cmd}, true
	}
	fail := func(err error, format string, a ...any) (Reply, bool) {
		return Reply{Outcome: Failed, Text: fmt.Sprintf(format, a...), Command: cmd, Err: err}, true
	}
	switch cmd.Spec.Path {
	case "help":
		text, err := commands.Help(cmd.Topic)
		if err != nil {
			return Reply{Outcome: Invalid, Text: err.Error(), Command: cmd, Err: err}, true
		}
		return say("%s", text)
	case "jobs":
		jobs, err := d.opts.Store.ListJobs(ctx, store.JobFilter{Active: !cmd.All, Limit: 20})
		if err != nil {
			return fail(err, "could not list jobs: %v", err)
		}
		if len(jobs) == 0 {
			if cmd.All {
				return say("no jobs yet")
			}
			return say("no job is queued or running (`jobs all` lists the recent ones)")
		}
		var b strings.Builder
		for _, j := range jobs {
			fmt.Fprintf(&b, "%s #%d `%s` %s · %s · by %s\n", statusIcon[j.Status], j.ID, j.Command, j.Status,
				j.CreatedAt.UTC().Format("2006-01-02 15:04:05"), j.User)
		}
		return say("%s", strings.TrimRight(b.String(), "\n"))
	case "history":
		n := cmd.N
		if n == 0 {
			n = 10
		}
		rows, err := d.opts.Store.BenchHistory(ctx, cmd.Service, n)
		if err != nil {
			return fail(err, "could not read history: %v", err)
		}
		if len(rows) == 0 {
			return say("no benchmark results for %s yet", cmd.Service)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "benchmark history of %s (newest first):\n", cmd.Service)
		fmt.Fprintf(&b, "%-16s  %-5s  %-26s  %9s  %10s  %10s  %11s\n", "when", "job", "settings", "tok/s", "stream t/s", "accept len", "accept rate")
		for _, r := range rows {
			fmt.Fprintf(&b, "%-16s  #%-4d  %-26s  %9.1f  %10.1f  %10.2f  %11.2f\n", r.At.UTC().Format("2006-01-02 15:04"), r.JobID,
				r.Settings, r.OutputTokS, r.PerStreamTokS, r.AcceptLen, r.AcceptRate)
		}
		return say("```\n%s```", b.String())
	case "cancel":
		j, err := d.opts.Store.Job(ctx, cmd.JobID)
		if errors.Is(err, store.ErrNotFound) {
			return Reply{Outcome: Invalid, Text: fmt.Sprintf("there is no job #%d (`jobs` lists them)", cmd.JobID), Command: cmd, Err: err}, true
		}
		if err != nil {
			return fail(err, "could not read job #%d: %v", cmd.JobID, err)
		}
		if j.Status.Final() {
			return Reply{Outcome: Invalid, Text: fmt.Sprintf("job #%d already %s", j.ID, j.Status), Command: cmd,
				Err: errors.New("job already final")}, true
		}
		elsewhere, err := d.opts.Engine.Cancel(ctx, j.ID)
		if err != nil {
			return fail(err, "could not cancel #%d: %v", j.ID, err)
		}
		if elsewhere != "" {
			return say("cancelling #%d `%s` (running in another opsbot process on %s): it stops at the next safe point", j.ID, j.Command, elsewhere)
		}
		return say("cancelling #%d `%s`: it stops at the next safe point", j.ID, j.Command)
	case "schedule add":
		s, err := d.opts.Store.AddSchedule(ctx, store.Schedule{Spec: cmd.Cron, Command: cmd.Sub.Text,
			Platform: req.Platform, Room: req.Room, CreatedBy: req.User})
		if err != nil {
			return fail(err, "could not add the schedule: %v", err)
		}
		return say("schedule #%d added: `%s` at `%s`", s.ID, s.Command, s.Spec)
	case "schedule list":
		list, err := d.opts.Store.Schedules(ctx)
		if err != nil {
			return fail(err, "could not list schedules: %v", err)
		}
		if len(list) == 0 {
			return say("no schedules (add one with `schedule add \"0 3 * * *\" sweep steps 1..5`)")
		}
		var b strings.Builder
		for _, s := range list {
			state := "active"
			if s.Paused {
				state = "paused"
			}
			last := "never run"
			if !s.LastRunAt.IsZero() {
				last = "last run " + s.LastRunAt.UTC().Format(time.DateTime) + fmt.Sprintf(" (#%d)", s.LastJobID)
			}
			fmt.Fprintf(&b, "#%d `%s` at `%s` · %s · %s · by %s\n", s.ID, s.Command, s.Spec, state, last, s.CreatedBy)
		}
		return say("%s", strings.TrimRight(b.String(), "\n"))
	case "schedule rm":
		if err := d.opts.Store.RemoveSchedule(ctx, cmd.ScheduleID); err != nil {
			return scheduleErr(cmd, err)
		}
		return say("schedule #%d removed", cmd.ScheduleID)
	case "schedule pause", "schedule resume":
		paused := cmd.Spec.Path == "schedule pause"
		if err := d.opts.Store.SetSchedulePaused(ctx, cmd.ScheduleID, paused); err != nil {
			return scheduleErr(cmd, err)
		}
		if paused {
			return say("schedule #%d paused", cmd.ScheduleID)
		}
		return say("schedule #%d resumed", cmd.ScheduleID)
	}
	return Reply{}, false
}

func scheduleErr(cmd *commands.Command, err error) (Reply, bool) {
	if errors.Is(err, store.ErrNotFound) {
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("there is no schedule #%d (`schedule list` lists them)", cmd.ScheduleID),
			Command: cmd, Err: err}, true
	}
	return Reply{Outcome: Failed, Text: fmt.Sprintf("schedule #%d: %v", cmd.ScheduleID, err), Command: cmd, Err: err}, true
}
