// Package schedule is the Scheduler: it fires the store's and the config's
// schedules through the door (bot) as requests of platform "schedule", with
// their creator's role and their target rooms, once per firing across the
// processes on a store, on the holder of the "scheduler" lease
// (leases.RunLeader); it decides missed firings by their policy, and checks a
// scheduled job's benchmarks for regressions (report.CheckRegression) once
// it finished. ParseSchedule, the cron reading the door shares, stays in bot.
package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// SchedulerLease is the store lease whose holder runs the schedules: of
// several opsbot processes on one store, only that one fires them.
const SchedulerLease = "scheduler"

// SchedulerOptions configure a Scheduler.
type SchedulerOptions struct {
	// Now is the clock (time.Now when nil); tests inject theirs and drive
	// Tick and CatchUp directly.
	Now func() time.Time
	// AfterRun, when set, is called with the final row of every job a
	// schedule started, once it has finished and its regression check (when
	// Regressions is set) has posted what it found.
	AfterRun func(ctx context.Context, job store.Job)
	// Regressions, when set, checks every scheduled job's benchmarks once it
	// finished (CheckRegression) and posts an alert to the schedule's rooms
	// when one dropped below the median of its comparable runs.
	Regressions *report.RegressionPolicy
	// Poll is how often Run looks for due firings (default 1s, divided
	// by Scale's factor).
	Poll time.Duration
	// Scale, when set, runs the scheduler's clock faster than the store's
	// (tests only: schedules fire at most once a minute).
	Scale  *TimeScale
	Logger *slog.Logger
}

// TimeScale is a scheduler clock that runs Factor times faster than the
// store's from Epoch on: at store time t it reads Epoch + (t - Epoch) *
// Factor. Processes that share a store agree on which firing is due when
// they share Factor and Epoch (the store's clock is the database's on
// PostgreSQL). It lets tests and benchmarks fire a `* * * * *` schedule
// every few seconds through `opsbot serve`; production never sets it.
type TimeScale struct {
	Factor float64 // > 1
	Epoch  time.Time
}

// Clock returns the scaled clock over base.
func (ts TimeScale) Clock(base func() time.Time) func() time.Time {
	return func() time.Time {
		d := base().Sub(ts.Epoch)
		return ts.Epoch.Add(time.Duration(float64(d) * ts.Factor))
	}
}

// ParseTimeScale reads a TimeScale written FACTOR@EPOCH, EPOCH in RFC 3339
// ("12@2026-12-04T18:00:00Z"). The factor must be between 1 and 10000 and
// the epoch within a day of now, so that scaled times stay in range.
func ParseTimeScale(s string, now time.Time) (TimeScale, error) {
	f, e, ok := strings.Cut(s, "@")
	if !ok {
		return TimeScale{}, fmt.Errorf("time scale %q: want FACTOR@EPOCH, e.g. 12@%s", s, now.UTC().Format(time.RFC3339))
	}
	factor, err := strconv.ParseFloat(f, 64)
	if err != nil || factor <= 1 || factor > 10000 {
		return TimeScale{}, fmt.Errorf("time scale %q: the factor must be a number above 1 and at most 10000", s)
	}
	epoch, err := time.Parse(time.RFC3339Nano, e)
	if err != nil {
		return TimeScale{}, fmt.Errorf("time scale %q: the epoch: %w", s, err)
	}
	if d := now.Sub(epoch); d > 24*time.Hour || d < -24*time.Hour {
		return TimeScale{}, fmt.Errorf("time scale %q: the epoch must be within a day of now (%s)", s, now.UTC().Format(time.RFC3339))
	}
	return TimeScale{Factor: factor, Epoch: epoch}, nil
}

// Scheduler fires the store's schedules (those added with `schedule add` and
// those of the config, synced in by NewScheduler) through the App's Inbound
// as platform "schedule": each run is authorised with its creator's role at
// run time and reports to the schedule's rooms. A firing is claimed in the
// store before it runs, so it runs once even when several processes share
// the store; a run whose previous run is still going is skipped and says so;
// a firing missed while no opsbot ran is run once at start or skipped, by
// the schedule's missed policy. Safe for concurrent use.
type Scheduler struct {
	app  *bot.App
	opts SchedulerOptions
	loc  *time.Location
	log  *slog.Logger
}

// NewScheduler builds the scheduler of app and makes the config's schedules
// the store's (config.schedules: a new entry is added, a removed one
// deleted, a kept one keeps its history).
func NewScheduler(ctx context.Context, app *bot.App, o SchedulerOptions) (*Scheduler, error) {
	if o.Now == nil {
		// The store's clock: on PostgreSQL the database's, so that the
		// instances sharing it agree on which firing is due.
		o.Now = app.Store.Clock()
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
		if o.Scale != nil {
			o.Poll = max(10*time.Millisecond, time.Duration(float64(time.Second)/o.Scale.Factor))
		}
	}
	if o.Scale != nil {
		o.Now = o.Scale.Clock(o.Now)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	tz := app.CurrentConfig().Timezone
	if tz == "" {
		tz = config.DefaultTimezone
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("scheduler: timezone %q: %w", tz, err)
	}
	if err := SyncConfigSchedules(ctx, app, o.Now()); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return &Scheduler{app: app, opts: o, loc: loc, log: log}, nil
}

// SyncConfigSchedules makes the schedules of the config in effect the
// store's config schedules (store.Store.SyncConfigSchedules): NewScheduler
// does it at start, `opsbot serve` again after a reload. Schedules added
// from chat are left alone. now is when a new one counts as created.
func SyncConfigSchedules(ctx context.Context, app *bot.App, now time.Time) error {
	var list []store.Schedule
	for _, c := range app.CurrentConfig().Schedules {
		list = append(list, store.Schedule{Spec: c.Cron, Command: c.Command, Creator: c.As, Targets: c.To,
			Missed: c.Missed, ConfigKey: fmt.Sprintf("config|%s|%s|%s|%s|%s", c.Cron, c.Command, c.As, c.To, c.Missed),
			CreatedBy: c.As, CreatedAt: now})
	}
	_, err := app.Store.SyncConfigSchedules(ctx, list)
	return err
}

// Run fires schedules while this process holds the scheduler lease: it
// waits for the lease, catches up the firings missed while no process held
// it, then fires each due schedule, until ctx ends (then it returns nil). A
// holder that finds its lease lost stops before its next firing and waits
// for the lease again.
func (s *Scheduler) Run(ctx context.Context) error {
	return leases.RunLeader(ctx, s.app.Leases, SchedulerLease, s.log, func(ctx context.Context, held func(context.Context) error) error {
		if err := s.catchUp(ctx, s.opts.Now(), held); err != nil {
			return err
		}
		t := time.NewTicker(s.opts.Poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if err := s.tick(ctx, s.opts.Now(), held); err != nil {
				return err
			}
		}
	})
}

// CatchUp decides, for each active schedule, the firings that fell between
// its last firing and now while no process ran it: by its missed policy, the
// latest one runs now (run) or is skipped (skip, the default), and either
// is recorded, so that it is decided once. A firing less than a minute (or
// two lease TTLs) old is not missed: it runs. Call it when taking the lease,
// before the first Tick.
func (s *Scheduler) CatchUp(ctx context.Context, now time.Time) error {
	return s.catchUp(ctx, now, nil)
}

// Tick fires every active schedule whose next firing is at or before now,
// once for all the firings that fell since its last one.
func (s *Scheduler) Tick(ctx context.Context, now time.Time) error {
	return s.tick(ctx, now, nil)
}

func (s *Scheduler) catchUp(ctx context.Context, now time.Time, held func(context.Context) error) error {
	return s.each(ctx, now, held, true)
}

func (s *Scheduler) tick(ctx context.Context, now time.Time, held func(context.Context) error) error {
	return s.each(ctx, now, held, false)
}

func (s *Scheduler) each(ctx context.Context, now time.Time, held func(context.Context) error, catchUp bool) error {
	list, err := s.app.Store.Schedules(ctx)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	for _, sc := range list {
		if sc.Paused {
			continue
		}
		sched, _, err := bot.ParseSchedule(sc.Spec, s.loc)
		if err != nil {
			s.log.Error("schedule has a bad cron spec: not run", "schedule", sc.ID, "err", err)
			continue
		}
		base := sc.FiredAt
		if base.IsZero() {
			base = sc.CreatedAt
		}
		first := sched.Next(base)
		if first.IsZero() {
			continue
		}
		if first.After(now) {
			if !sc.NextRunAt.Equal(first) {
				if err := s.app.Store.SetScheduleNext(ctx, sc.ID, first); err != nil {
					s.log.Warn("note next run", "schedule", sc.ID, "err", err)
				}
			}
			continue
		}
		// The latest firing at or before now; earlier ones are folded into it.
		latest, missed := first, 0
		for n := sched.Next(latest); !n.IsZero() && !n.After(now) && missed < 1_000_000; n = sched.Next(latest) {
			latest = n
			missed++
		}
		if held != nil {
			if err := held(ctx); err != nil {
				return err
			}
		}
		claimed, err := s.app.Store.ClaimFiring(ctx, sc.ID, latest, sched.Next(latest))
		if err != nil {
			s.log.Error("claim a firing", "schedule", sc.ID, "err", err)
			continue
		}
		if !claimed {
			continue
		}
		// A firing within the grace is on time, not missed: the process
		// that held the lease may have stopped just before it.
		missedIt := catchUp && now.Sub(latest) > s.grace()
		if missedIt && sc.Missed != config.MissedRun {
			s.notify(ctx, sc, fmt.Sprintf("schedule #%d missed its run of %s while no opsbot was running: skipped (missed: skip). "+
				"Next run: %s.", sc.ID, s.stamp(sc, latest), s.stamp(sc, sched.Next(latest))))
			continue
		}
		s.fire(ctx, sc, latest, now, missedIt)
	}
	return nil
}

// grace is how late a firing may be run at a start or a lease takeover and
// still count as on time: a minute, or two lease TTLs when longer.
func (s *Scheduler) grace() time.Duration {
	return max(time.Minute, 2*s.app.Leases.TTL())
}

// stamp writes t in the schedule's time zone.
func (s *Scheduler) stamp(sc store.Schedule, t time.Time) string {
	_, zone, err := bot.ParseSchedule(sc.Spec, s.loc)
	if err != nil || zone == nil {
		zone = s.loc
	}
	return t.In(zone).Format("2006-01-02 15:04 MST")
}

// targets returns where sc reports.
func targetsOf(sc store.Schedule) []bot.Target {
	if sc.Targets == "" {
		return []bot.Target{{Platform: sc.Platform, Room: sc.Room}}
	}
	return bot.ParseTargets(sc.Targets)
}

// fire runs one firing of sc, unless its previous run is still going.
func (s *Scheduler) fire(ctx context.Context, sc store.Schedule, firing, now time.Time, late bool) {
	if sc.LastJobID != 0 {
		j, err := s.app.Store.Job(ctx, sc.LastJobID)
		if err == nil && !j.Status.Final() {
			s.notify(ctx, sc, fmt.Sprintf("schedule #%d skipped its run of %s: its previous run, job #%d `%s`, is still %s. "+
				"`job %d` shows it; `cancel %d` stops it.", sc.ID, s.stamp(sc, firing), j.ID, j.Command, j.Status, j.ID, j.ID))
			return
		}
	}
	to := targetsOf(sc)
	r := s.app.Dispatcher.Handle(ctx, bot.Request{Platform: bot.PlatformSchedule, Text: sc.Command,
		Schedule: &bot.ScheduleRun{ID: sc.ID, Creator: sc.Owner(), To: to}})
	if r.Outcome != bot.Queued {
		if r.JobID != 0 {
			if err := s.app.Store.RecordScheduleRun(ctx, sc.ID, now, r.JobID); err != nil {
				s.log.Warn("record schedule run", "schedule", sc.ID, "err", err)
			}
		}
		s.notify(ctx, sc, r.Text)
		return
	}
	if err := s.app.Store.RecordScheduleRun(ctx, sc.ID, now, r.JobID); err != nil {
		s.log.Warn("record schedule run", "schedule", sc.ID, "err", err)
	}
	what := "started"
	if late {
		what = "started the run it missed at " + s.stamp(sc, firing) + " (missed: run) as"
	}
	s.log.Info("schedule fired", "schedule", sc.ID, "job", r.JobID, "command", sc.Command)
	if len(to) > 1 {
		for _, t := range to[1:] {
			s.post(ctx, t, fmt.Sprintf("schedule #%d %s job #%d `%s` (its thread is in %s:%s)", sc.ID, what, r.JobID, sc.Command,
				to[0].Platform, to[0].Room))
		}
	}
	if s.opts.Regressions != nil || s.opts.AfterRun != nil {
		id := r.JobID
		go func() {
			bg := context.WithoutCancel(ctx)
			if s.opts.Regressions != nil {
				s.checkRegression(bg, sc, id)
			}
			if s.opts.AfterRun == nil {
				return
			}
			j, err := s.app.Engine.Wait(bg, id)
			if err != nil {
				s.log.Warn("wait for a scheduled job", "job", id, "err", err)
				return
			}
			s.opts.AfterRun(bg, j)
		}()
	}
}

// checkRegression waits for scheduled job id, judges its benchmarks against
// their comparable history and posts an alert to sc's rooms when one dropped.
func (s *Scheduler) checkRegression(ctx context.Context, sc store.Schedule, id int64) {
	out, err := s.app.Wait(ctx, id)
	if err != nil {
		s.log.Warn("wait for a scheduled job", "job", id, "err", err)
		return
	}
	j, err := s.app.Store.Job(ctx, id)
	if err != nil {
		s.log.Warn("read a scheduled job", "job", id, "err", err)
		return
	}
	alert, err := report.CheckRegression(ctx, s.app.Store, j, out.Result, *s.opts.Regressions)
	if err != nil {
		s.log.Warn("regression check", "job", id, "err", err)
		return
	}
	if alert != nil {
		s.log.Warn("regression", "schedule", sc.ID, "job", id, "service", alert.Service)
		s.notify(ctx, sc, alert.Text)
	}
}

// notify posts text to every room of sc.
func (s *Scheduler) notify(ctx context.Context, sc store.Schedule, text string) {
	s.log.Info("schedule notice", "schedule", sc.ID, "text", text)
	for _, t := range targetsOf(sc) {
		s.post(ctx, t, text)
	}
}

func (s *Scheduler) post(ctx context.Context, t bot.Target, text string) {
	c := s.app.Engine.Chats()[t.Platform]
	if c == nil {
		s.log.Warn("no chat for a schedule's room", "platform", t.Platform, "room", t.Room)
		return
	}
	if _, err := c.Post(ctx, t.Room, bot.Message{Kind: bot.KindNotice, Text: text}); err != nil {
		s.log.Warn("post schedule notice", "platform", t.Platform, "room", t.Room, "err", err)
	}
}
