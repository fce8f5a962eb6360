package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// ChangeLog is the job history as `mtp undo` reads it (ops.ChangeLog): the
// unit changes recorded in the results of a store's jobs.
type ChangeLog struct{ Store *store.Store }

var _ ops.ChangeLog = ChangeLog{}

// UnitChanges implements ops.ChangeLog: the service's finished jobs that
// were no dry run and whose result records a change of the unit or of a
// file beside it (ops.UnitChange.Changed), or, for a replicated service,
// a rollout that left a replica changed (ops.RolloutResult.Changed), newest first, at most limit
// (<= 0: 50). It reads the store a page at a time until it has them.
func (c ChangeLog) UnitChanges(ctx context.Context, service string, limit int) ([]ops.AppliedChange, error) {
	if limit <= 0 {
		limit = 50
	}
	const page = 200
	var out []ops.AppliedChange
	before := int64(0)
	for len(out) < limit {
		jobs, err := c.Store.FinishedJobs(ctx, service, before, page)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			var res ops.Result
			if err := json.Unmarshal(j.Result, &res); err != nil {
				return nil, fmt.Errorf("read the result of job #%d: %w", j.ID, err)
			}
			if (res.Unit.Changed() || res.Rollout.Changed()) && len(out) < limit {
				c := ops.AppliedChange{JobID: j.ID, Command: j.Command, Status: string(j.Status), Rollout: res.Rollout}
				if res.Unit != nil {
					c.Unit = *res.Unit
				}
				out = append(out, c)
			}
		}
		if len(jobs) < page {
			break
		}
		before = jobs[len(jobs)-1].ID
	}
	return out, nil
}

// jobCommand returns the typed command job j runs, as the store keeps it
// (commands.Decode of its Args). Jobs recorded before the store kept the
// typed command have no Args: their canonical text is parsed instead, on
// the configuration in effect; that is the only command text read back.
func (d *Dispatcher) jobCommand(j store.Job) (commands.Command, error) {
	if len(j.Args) > 0 {
		return commands.Decode(j.Args)
	}
	return d.Parse(j.Command)
}

// answerJob is `job N`: one job in full.
func answerJob(ctx context.Context, d *Dispatcher, _ Request, cmd *commands.JobInfo) Reply {
	j, err := d.opts.Store.Job(ctx, cmd.ID)
	if errors.Is(err, store.ErrNotFound) {
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("there is no job #%d (`jobs all` lists the recent ones)", cmd.ID), Err: err}
	}
	if err != nil {
		return failed(err, "could not read job #%d: %v", cmd.ID, err)
	}
	evs, err := d.opts.Store.Events(ctx, j.ID)
	if err != nil {
		return failed(err, "could not read the steps of job #%d: %v", j.ID, err)
	}
	audit, err := d.opts.Store.JobAudit(ctx, j.ID)
	if err != nil {
		return failed(err, "could not read who asked for job #%d: %v", j.ID, err)
	}
	var res *ops.Result
	if len(j.Result) > 0 {
		res = &ops.Result{}
		if err := json.Unmarshal(j.Result, res); err != nil {
			return failed(err, "could not read the result of job #%d: %v", j.ID, err)
		}
	}
	needsConfirm := false
	if c, err := d.jobCommand(j); err == nil {
		needsConfirm = commands.NeedsConfirm(c)
	}
	r := say("%s", RenderJob(j, evs, audit, res, needsConfirm))
	o := jobOutcome(j)
	o.Result = res
	o.Events = opsEvents(evs)
	r.Job = &o
	return r
}

// RenderJob draws one job in full for `job N`: its status line, who asked
// and who confirmed it, its steps with their times, its result and the unit
// diff it applied. Times are in UTC and say so. needsConfirm says the
// command asks for confirmation, so that a job confirmed with the request
// itself (a terminal's --yes, a schedule) says so.
func RenderJob(j store.Job, evs []store.Event, audit []store.AuditEntry, res *ops.Result, needsConfirm bool) string {
	v := report.JobView{ID: j.ID, Command: j.Command, Status: j.Status, Started: j.StartedAt, Ended: j.EndedAt, Error: j.Error}
	if res != nil {
		v.Summary = res.Summary
	}
	var b strings.Builder
	b.WriteString(report.RenderStatus(v, j.EndedAt))
	fmt.Fprintf(&b, "\nasked by %s at %s UTC", jobs.JobOwner(j), j.CreatedAt.UTC().Format("2006-01-02 15:04:05"))
	if j.ScheduleID != 0 {
		fmt.Fprintf(&b, " (schedule #%d)", j.ScheduleID)
	}
	confirmed := false
	for _, a := range audit {
		switch {
		case isWatchdogDecision(a.Decision):
			// The watchdog's own run (watchdogRun): no one confirmed it.
			confirmed = true
			incident, key, _ := strings.Cut(strings.TrimPrefix(a.Decision, "watchdog "), ": ")
			fmt.Fprintf(&b, "\nstarted by the watchdog for %s, without asking anyone: %s is true in the config", incident, key)
		case strings.HasPrefix(a.Decision, "confirmed by "):
			confirmed = true
			fmt.Fprintf(&b, "\nconfirmed by %s at %s UTC", strings.TrimPrefix(a.Decision, "confirmed by "), a.At.UTC().Format("15:04:05"))
		case a.Decision == store.DecisionCancelled:
			fmt.Fprintf(&b, "\ncancelled by %s at %s UTC", userKey(a.Platform, a.User), a.At.UTC().Format("15:04:05"))
		}
		if a.Detail != "" && strings.Contains(a.Detail, " as ") {
			fmt.Fprintf(&b, " (%s)", strings.SplitN(a.Detail, ";", 2)[0])
		}
	}
	if needsConfirm && !confirmed {
		if j.ScheduleID != 0 {
			b.WriteString("\nconfirmed when the schedule was added")
		} else {
			b.WriteString("\nconfirmed with the request (--yes at a terminal)")
		}
	}
	if !j.StartedAt.IsZero() {
		fmt.Fprintf(&b, "\nstarted %s UTC", j.StartedAt.UTC().Format("2006-01-02 15:04:05"))
		if !j.EndedAt.IsZero() {
			fmt.Fprintf(&b, ", ended %s UTC", j.EndedAt.UTC().Format("15:04:05"))
		}
	}
	if len(evs) > 0 {
		lines := make([]string, len(evs))
		for i, e := range evs {
			lines[i] = report.RenderEvent(ops.Event{At: e.At, Step: e.Step, Status: ops.StepStatus(e.Status), Message: e.Message})
		}
		fmt.Fprintf(&b, "\nsteps:\n%s", report.Pre(strings.Join(lines, "\n")))
	} else {
		b.WriteString("\nno steps recorded")
	}
	if res != nil {
		r := *res
		r.Logs = nil // svc logs: `svc logs` shows them again
		fmt.Fprintf(&b, "\n%s", report.RenderResult(v, &r))
		// A dry run's result block already shows the diff it previewed.
		if u := res.Unit; u != nil && u.Diff != "" && !strings.Contains(" "+j.Command+" ", " --dry-run ") {
			what := "the unit diff it applied"
			if j.Status != store.Succeeded {
				what = "the unit diff it wrote (it " + string(j.Status) + ": the unit may have been restored since; `mtp show` says what runs)"
			}
			fmt.Fprintf(&b, "\n%s:\n%s", what, report.Pre(u.Diff))
		}
	}
	return b.String()
}

func userKey(platform, user string) string {
	if platform == "" {
		return user
	}
	return platform + ":" + user
}
