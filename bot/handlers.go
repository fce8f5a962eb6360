package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// answerFor returns how the door answers cmd at once, without a job (a
// command whose Policy.Hosts is false, or that the door answers from its
// hosts too: Policy.Answered), by the command's type; nil for a job
// command, which runs its pipeline (commands.Job) in the engine. A new
// answered command is its file in commands and one case here.
func answerFor(cmd commands.Command) answer {
	switch c := cmd.(type) {
	case *commands.ScheduleAdd:
		return bind(c, answerScheduleAdd)
	case *commands.ScheduleList:
		return bind(c, answerScheduleList)
	case *commands.ScheduleRm:
		return bind(c, answerScheduleRm)
	case *commands.SchedulePause:
		return bind(c, answerSchedulePause)
	case *commands.ScheduleResume:
		return bind(c, answerScheduleResume)
	case *commands.WatchdogSilence:
		return bind(c, answerSilence)
	case *commands.Ack:
		return bind(c, answerAck)
	case *commands.Jobs:
		return bind(c, answerJobs)
	case *commands.JobInfo:
		return bind(c, answerJob)
	case *commands.Cancel:
		return bind(c, answerCancel)
	case *commands.History:
		return bind(c, answerHistory)
	case *commands.HelpCmd:
		return bind(c, answerHelp)
	case *commands.Fleet:
		return bind(c, answerFleet)
	}
	return nil
}

// answer is how the door answers one command at once, for the request
// that carried it.
type answer func(ctx context.Context, d *Dispatcher, req Request) Reply

// bind is the answer f gives to c.
func bind[C commands.Command](c C, f func(context.Context, *Dispatcher, Request, C) Reply) answer {
	return func(ctx context.Context, d *Dispatcher, req Request) Reply { return f(ctx, d, req, c) }
}

func say(format string, a ...any) Reply {
	return Reply{Outcome: Answered, Text: fmt.Sprintf(format, a...), Audience: ToRoom}
}

func failed(err error, format string, a ...any) Reply {
	return Reply{Outcome: Failed, Text: fmt.Sprintf(format, a...), Err: err}
}

func answerHelp(_ context.Context, _ *Dispatcher, _ Request, cmd *commands.HelpCmd) Reply {
	text, err := commands.Help(cmd.Topic)
	if err != nil {
		return Reply{Outcome: Invalid, Text: err.Error(), Err: err}
	}
	return say("%s", text)
}

// JobsListed is how many jobs `jobs` lists at most, the newest.
const JobsListed = 20

func answerJobs(ctx context.Context, d *Dispatcher, _ Request, cmd *commands.Jobs) Reply {
	f := store.JobFilter{Active: !cmd.All, Limit: JobsListed}
	jobs, err := d.opts.Store.ListJobs(ctx, f)
	if err != nil {
		return failed(err, "could not list jobs: %v", err)
	}
	omitted := 0
	if len(jobs) == JobsListed {
		n, err := d.opts.Store.CountJobs(ctx, f)
		if err != nil {
			return failed(err, "could not count jobs: %v", err)
		}
		omitted = max(0, n-len(jobs))
	}
	r := say("no jobs yet")
	switch {
	case len(jobs) == 0 && !cmd.All:
		r = say("no job is queued or running (`jobs all` lists the recent ones)")
	case len(jobs) > 0:
		var b strings.Builder
		for _, j := range jobs {
			fmt.Fprintf(&b, "%s #%d `%s` %s · %s · by %s\n", report.StatusIcon(j.Status), j.ID, j.Command, j.Status,
				j.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC"), j.User)
		}
		if omitted > 0 {
			fmt.Fprintf(&b, "… and %d older not listed (`job N` shows any one)\n", omitted)
		}
		r = say("%s", strings.TrimRight(b.String(), "\n"))
	}
	r.Jobs = make([]JobOutcome, 0, len(jobs))
	for _, j := range jobs {
		r.Jobs = append(r.Jobs, jobOutcome(j))
	}
	r.Omitted = omitted
	return r
}

func answerHistory(ctx context.Context, d *Dispatcher, _ Request, cmd *commands.History) Reply {
	n := cmd.N
	if n == 0 {
		n = 10
	}
	if len(cmd.Replicas) > 0 {
		// A replicated service: each replica's history, one after another.
		var b strings.Builder
		for _, r := range cmd.Replicas {
			rows, err := d.opts.Store.BenchHistory(ctx, r, n)
			if err != nil {
				return failed(err, "could not read the history of %s: %v", r, err)
			}
			if len(rows) == 0 {
				fmt.Fprintf(&b, "no benchmark results for %s yet\n", r)
				continue
			}
			b.WriteString(renderHistory(r, rows))
		}
		return say("%s", report.Pre(strings.TrimRight(b.String(), "\n")))
	}
	rows, err := d.opts.Store.BenchHistory(ctx, cmd.Service, n)
	if err != nil {
		return failed(err, "could not read history: %v", err)
	}
	if len(rows) == 0 {
		return say("no benchmark results for %s yet", cmd.Service)
	}
	return say("%s", report.Pre(renderHistory(cmd.Service, rows)))
}

func renderHistory(service string, rows []store.BenchResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "benchmark history of %s (newest first):\n", service)
	fmt.Fprintf(&b, "%-20s  %-12s  %-26s  %-22s  %9s  %10s  %10s  %11s\n", "when", "job", "settings", "load (n/conc/in/out)",
		"tok/s", "stream t/s", "accept len", "accept rate")
	unknown := false
	for _, r := range rows {
		load := "unknown"
		if l := r.Load(); l.Known() {
			load = fmt.Sprintf("%d/%d/%d/%d", l.Prompts, l.Concurrency, l.InputLen, l.OutputLen)
		}
		tok, stream := report.Cell(r.OutputTokS, bench.Known(r.OutputTokS), "%.1f"), report.Cell(r.PerStreamTokS, bench.Known(r.PerStreamTokS), "%.1f")
		al := report.Cell(r.AcceptLen, bench.KnownAcceptLen(r.AcceptLen), "%.2f")
		rate := report.Cell(r.AcceptRate, bench.KnownAcceptLen(r.AcceptLen) && bench.Known(r.AcceptRate), "%.2f")
		unknown = unknown || strings.Contains(tok+stream+al+rate, bench.Dash)
		fmt.Fprintf(&b, "%-20s  %-12s  %-26s  %-22s  %9s  %10s  %10s  %11s\n", report.Stamp(r.At), report.ResultSource(r),
			r.Settings, load, tok, stream, al, rate)
	}
	if unknown {
		fmt.Fprintf(&b, "%s: not measured in that run (`job N` says why)\n", bench.Dash)
	}
	return b.String()
}

func answerScheduleAdd(ctx context.Context, d *Dispatcher, req Request, cmd *commands.ScheduleAdd) Reply {
	where := "here"
	to := cmd.To
	if to != "" {
		where = "to " + to
	}
	sched, zone, err := ParseSchedule(cmd.Cron, d.location())
	if err != nil {
		return Reply{Outcome: Invalid, Text: err.Error(), Err: err}
	}
	if to == "" && d.transient(req.Platform) {
		// Here is a terminal: nobody reads it when `opsbot serve` runs the
		// schedule. Report to the config's rooms, or refuse.
		if r, bad := vetScheduleAdd(d, req, cmd); bad {
			return r
		}
		rooms := *d.reportRooms.Load()
		ts := make([]commands.Target, len(rooms))
		for i, r := range rooms {
			ts[i] = commands.Target{Platform: r.Platform, Room: r.Room}
		}
		to = commands.FormatTargets(ts)
		where = "to " + to + " (the config's report rooms: nobody reads this terminal when `opsbot serve` runs it; --to names others)"
	}
	next := sched.Next(d.opts.Now())
	if cmd.DryRun {
		return say("dry run: would add a schedule running `%s` at `%s`, reporting %s, first at %s; nothing was changed",
			commands.Text(cmd.Sub), cmd.Cron, where, zoneStamp(next, zone))
	}
	s, err := d.opts.Store.AddSchedule(ctx, store.Schedule{Spec: cmd.Cron, Command: commands.Text(cmd.Sub),
		Platform: req.Platform, Room: req.Room, CreatedBy: req.User, Creator: req.Platform + ":" + req.User, Targets: to})
	if err != nil {
		return failed(err, "could not add the schedule: %v", err)
	}
	return say("schedule #%d added: `%s` at `%s`, reporting %s; first run %s. Runs are authorised as %s:%s each time.",
		s.ID, s.Command, s.Spec, where, zoneStamp(next, zone), req.Platform, req.User)
}

// vetScheduleAdd refuses a schedule added without --to in a transient chat
// (a terminal, which nobody reads when `opsbot serve` runs the schedule)
// when the config names no report rooms to send its reports to instead.
func vetScheduleAdd(d *Dispatcher, req Request, cmd *commands.ScheduleAdd) (Reply, bool) {
	if cmd.To != "" || !d.transient(req.Platform) {
		return Reply{}, false
	}
	if rooms := d.reportRooms.Load(); rooms != nil && len(*rooms) > 0 {
		return Reply{}, false
	}
	msg := fmt.Sprintf("not added: a schedule reports where it was added, and nobody reads this terminal when `opsbot serve` runs it; "+
		"the config names no room to report to instead (slack.channel, matrix.rooms). Say where its reports go: `%s`. Nothing was changed.",
		scheduleAddTo(cmd, "slack:CHANNEL"))
	return Reply{Outcome: Invalid, Text: msg, Command: cmd, Err: errors.New("a schedule added in a terminal needs --to")}, true
}

// scheduleAddTo is cmd (a schedule add) written with --to targets.
func scheduleAddTo(cmd *commands.ScheduleAdd, targets string) string {
	cron := cmd.Cron
	if strings.ContainsAny(cron, " \t") {
		cron = `"` + cron + `"`
	}
	return fmt.Sprintf("schedule add --to %s %s %s", targets, cron, commands.Text(cmd.Sub))
}

func answerScheduleList(ctx context.Context, d *Dispatcher, _ Request, _ *commands.ScheduleList) Reply {
	list, err := d.opts.Store.Schedules(ctx)
	if err != nil {
		return failed(err, "could not list schedules: %v", err)
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
			last = "last run " + report.Stamp(s.LastRunAt) + fmt.Sprintf(" (#%d)", s.LastJobID)
		}
		next := ""
		if sched, zone, err := ParseSchedule(s.Spec, d.location()); err == nil && !s.Paused {
			from := d.opts.Now()
			if s.FiredAt.After(from) {
				from = s.FiredAt
			}
			next = " · next " + zoneStamp(sched.Next(from), zone)
		}
		to := s.Targets
		if to == "" {
			to = s.Platform + ":" + s.Room
		}
		origin := ""
		if s.ConfigKey != "" {
			origin = " · from the config"
		}
		fmt.Fprintf(&b, "#%d `%s` at `%s` · %s%s · %s · as %s · to %s%s\n", s.ID, s.Command, s.Spec, state, next, last, s.Owner(), to, origin)
	}
	return say("%s", strings.TrimRight(b.String(), "\n"))
}

func answerScheduleRm(ctx context.Context, d *Dispatcher, _ Request, cmd *commands.ScheduleRm) Reply {
	s, err := d.opts.Store.Schedule(ctx, cmd.ID)
	if err != nil {
		return scheduleErr(cmd.ID, err)
	}
	if s.ConfigKey != "" {
		// The config's schedules are the config's: removed here, the next
		// start would add it again from the file.
		where := "the config file"
		if d.opts.ConfigFile != "" {
			where = d.opts.ConfigFile
		}
		msg := fmt.Sprintf("schedule #%d (`%s` at `%s`) comes from the config, so chat cannot remove it: delete it from `schedules:` in %s "+
			"and reload opsbot (`systemctl reload opsbot`, or SIGHUP). Until then `schedule pause %d` stops it. Nothing was changed.",
			s.ID, s.Command, s.Spec, where, s.ID)
		return Reply{Outcome: Refused, Refusal: RefusedConfig, Text: msg, Command: cmd, Err: errors.New("a schedule of the config")}
	}
	if cmd.DryRun {
		return say("dry run: would remove schedule #%d (`%s` at `%s`); nothing was changed", s.ID, s.Command, s.Spec)
	}
	if err := d.opts.Store.RemoveSchedule(ctx, cmd.ID); err != nil {
		return scheduleErr(cmd.ID, err)
	}
	return say("schedule #%d removed", cmd.ID)
}

func answerSchedulePause(ctx context.Context, d *Dispatcher, _ Request, cmd *commands.SchedulePause) Reply {
	return setSchedulePaused(ctx, d, cmd.ID, cmd.DryRun, true)
}

func answerScheduleResume(ctx context.Context, d *Dispatcher, _ Request, cmd *commands.ScheduleResume) Reply {
	return setSchedulePaused(ctx, d, cmd.ID, cmd.DryRun, false)
}

// setSchedulePaused is schedule pause (paused) and schedule resume.
func setSchedulePaused(ctx context.Context, d *Dispatcher, id int64, dryRun, paused bool) Reply {
	verb := map[bool]string{true: "pause", false: "resume"}[paused]
	if dryRun {
		s, err := d.opts.Store.Schedule(ctx, id)
		if err != nil {
			return scheduleErr(id, err)
		}
		return say("dry run: would %s schedule #%d (`%s` at `%s`); nothing was changed", verb, s.ID, s.Command, s.Spec)
	}
	if err := d.opts.Store.SetSchedulePaused(ctx, id, paused); err != nil {
		return scheduleErr(id, err)
	}
	return say("schedule #%d %sd", id, verb)
}

func scheduleErr(id int64, err error) Reply {
	if errors.Is(err, store.ErrNotFound) {
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("there is no schedule #%d (`schedule list` lists them)", id), Err: err}
	}
	return failed(err, "schedule #%d: %v", id, err)
}

// location is the zone of cron specs without CRON_TZ= (the config's timezone).
func (d *Dispatcher) location() *time.Location {
	if d.opts.Timezone != nil {
		return d.opts.Timezone
	}
	return time.UTC
}

// zoneStamp writes t in zone, saying which.
func zoneStamp(t time.Time, zone *time.Location) string {
	if t.IsZero() {
		return "never"
	}
	return t.In(zone).Format("2006-01-02 15:04 MST")
}

func answerSilence(ctx context.Context, d *Dispatcher, req Request, cmd *commands.WatchdogSilence) Reply {
	until := d.opts.Now().Add(cmd.For)
	if cmd.DryRun {
		return say("dry run: would silence the watchdog on %s until %s; nothing was changed", cmd.Service, report.Stamp(until))
	}
	if err := d.opts.Store.Silence(ctx, cmd.Service, until, req.Platform+":"+req.User, d.opts.Now()); err != nil {
		return failed(err, "could not silence %s: %v", cmd.Service, err)
	}
	return say("the watchdog is silent on %s until %s (asked by %s): no alert opens and no reminder is sent for it until then. "+
		"`watchdog silence %s 1m` ends it early.", cmd.Service, report.Stamp(until), userLabel(req), cmd.Service)
}

func answerCancel(ctx context.Context, d *Dispatcher, req Request, cmd *commands.Cancel) Reply {
	return d.cancelJob(ctx, req, commands.Text(cmd), cmd.ID)
}

func answerAck(ctx context.Context, d *Dispatcher, req Request, cmd *commands.Ack) Reply {
	in, err := d.opts.Store.AckIncident(ctx, cmd.Incident, req.Platform+":"+req.User, d.opts.Now())
	if errors.Is(err, store.ErrNotFound) {
		if old, rerr := d.opts.Store.Incident(ctx, cmd.Incident); rerr == nil && !old.Open() {
			return say("incident #%d of %s is already closed (since %s): nothing to acknowledge", old.ID, old.Service, report.Stamp(old.ClosedAt))
		}
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("there is no open incident #%d (the alert shows its number)", cmd.Incident), Err: err}
	}
	if err != nil {
		return failed(err, "could not acknowledge incident #%d: %v", cmd.Incident, err)
	}
	if d.opts.Engine != nil {
		EditAlerts(ctx, d.opts.Engine.Chats(), in, false, d.log)
	}
	return say("incident #%d of %s acknowledged by %s at %s: no more reminders. The alert still follows the service.",
		in.ID, in.Service, in.AckedBy, report.Stamp(in.AckedAt))
}

// Fleet is `fleet`'s answer as data (report.Fleet), for the adapters, which
// import bot only: the terminal's --json prints it.
type Fleet = report.Fleet

// answerFleet answers `fleet` at once, in one message: the hosts' one SSH
// round each (the command's Run, outside any job: ops.Runbook.Fleet) and,
// meanwhile, the store's newest result row of each service, its open
// incidents and its queued and running jobs, joined by report.NewFleet.
func answerFleet(ctx context.Context, d *Dispatcher, _ Request, cmd *commands.Fleet) Reply {
	if d.opts.Engine == nil || d.opts.Engine.Backend() == nil {
		return failed(errors.New("no hosts"), "no hosts are configured: add hosts and services to the config (or run with --lab)")
	}
	t0 := time.Now()
	type hostsRead struct {
		res *ops.Result
		err error
	}
	hosts := make(chan hostsRead, 1)
	go func() {
		res, err := d.opts.Engine.Backend().Run(ctx, ops.JobHold{}, cmd, ops.Discard)
		hosts <- hostsRead{res, err}
	}()
	in := report.FleetStore{Latest: map[string]store.BenchResult{}}
	var storeErr error
	if incs, err := d.opts.Store.OpenIncidents(ctx); err == nil {
		in.Incidents = incs
	} else {
		storeErr = err
	}
	if js, err := d.opts.Store.ListJobs(ctx, store.JobFilter{Active: true, Limit: 1000}); err == nil {
		in.Jobs = js
	} else {
		storeErr = err
	}
	h := <-hosts
	took := time.Since(t0)
	if h.err != nil {
		return failed(h.err, "fleet: %v", h.err)
	}
	if h.res == nil || h.res.Fleet == nil {
		return failed(errors.New("no fleet state"), "fleet: the hosts' round returned nothing")
	}
	if latest, err := d.opts.Store.LatestBench(ctx); err == nil {
		for _, s := range h.res.Fleet.Services {
			if r, ok := latest[s.Name]; ok {
				in.Latest[s.Name] = r
			}
		}
	} else {
		storeErr = err
	}
	f := report.NewFleet(h.res.Fleet, in, took, d.opts.Now())
	text := f.Text()
	if storeErr != nil {
		// What the hosts said stands; what the store would add is unknown.
		text += fmt.Sprintf("\nthe store did not answer (%v): results, incidents and jobs may be missing", storeErr)
	}
	r := say("%s", text)
	r.Fleet = f
	return r
}
