// Package watchdog is the Watchdog: on the holder of the "watchdog" store
// lease (leases.RunLeader) it looks at every configured service each
// watchdog.interval and keeps one incident per service in the store, with
// one alert message per target room, edited as the incident evolves and
// closed when the service serves again. Everything it starts goes through
// the door (bot) as platform "watchdog"; the alert's text and the rule for
// its own runs are the door's (bot/alerts.go), since `ack` edits the alert
// too.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// WatchdogLease is the store lease whose holder runs the watchdog: of
// several opsbot processes on one store, only that one looks and alerts.
const WatchdogLease = "watchdog"

// Incident kinds the watchdog opens.
const (
	IncidentLoop        = "restart_loop" // systemd restarts the unit again and again
	IncidentDown        = "down"         // the unit is failed or stopped
	IncidentUnhealthy   = "unhealthy"    // the unit runs but the engine's health check errs
	IncidentUnreachable = "unreachable"  // its host did not answer
)

// WatchdogOptions configure a Watchdog.
type WatchdogOptions struct {
	// Now is the clock (time.Now when nil); tests inject theirs and call Pass.
	Now func() time.Time
	// Remind is the time between reminders of an unacknowledged alert
	// (default: watchdog.remind of the config in effect).
	Remind time.Duration
	// Parallel bounds the services looked at at once (default 16).
	Parallel int
	Logger   *slog.Logger
}

// Watchdog looks at every configured service each watchdog.interval: its
// systemd state, NRestarts and the engine's health, as `svc status` sees
// them, skipping a service while a job holds it. A restart loop, a failed
// or stopped unit, an engine whose health check errs or a host that does
// not answer opens an incident: one alert message per target room
// (watchdog.to), saying what was seen with the journal's diagnosis, edited
// as the incident evolves and closed when the service serves again. The
// alert's thread offers `gpu recover SERVICE` as a proposal anyone with the
// operator role may confirm, or, with services.X.auto_recover, the watchdog
// starts it itself, once per incident. Unacknowledged alerts are reminded
// every Remind; `ack N` stops that, `watchdog silence SERVICE DURATION`
// keeps a service quiet. Incidents live in the store, one open per service,
// so two processes on one store alert once.
//
// Each pass reads the config in effect (App.CurrentConfig: the services,
// watchdog.interval, watchdog.remind, watchdog.to, services.X.auto_recover),
// so a reload applies from the next pass; what it starts itself goes
// through the door as platform "watchdog" (WatchdogRun). Safe for
// concurrent use.
type Watchdog struct {
	app  *bot.App
	opts WatchdogOptions
	log  *slog.Logger
}

// NewWatchdog builds the watchdog of app. With no room at all to alert in
// (watchdog.to, else the Slack channel and the first Matrix room) alerts are
// only logged, and NewWatchdog says so in the log.
func NewWatchdog(app *bot.App, o WatchdogOptions) (*Watchdog, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	w := &Watchdog{app: app, opts: o, log: log}
	cfg := app.CurrentConfig()
	if cfg.Watchdog.To != "" && len(bot.ParseTargets(cfg.Watchdog.To)) == 0 {
		return nil, fmt.Errorf("watchdog.to %q: not platform:room targets", cfg.Watchdog.To)
	}
	if len(w.settings().to) == 0 {
		log.Warn("the watchdog has no room to alert: set watchdog.to (e.g. slack:C0OPS); alerts are only logged")
	}
	return w, nil
}

// watchSettings are the watchdog's settings in the config in effect, read
// once per pass.
type watchSettings struct {
	services []string // the services to look at (each replica of a replicated one), by name
	interval time.Duration
	remind   time.Duration
	to       []bot.Target    // where alerts go, first one first
	auto     map[string]bool // services.X.auto_recover
}

// settings reads the watchdog's settings from the config in effect, under
// the lock a reload writes it under.
func (w *Watchdog) settings() watchSettings {
	cfg := w.app.CurrentConfig()
	s := watchSettings{services: cfg.ServiceNames(), interval: cfg.Watchdog.Interval.D(), remind: w.opts.Remind,
		auto: map[string]bool{}}
	if s.interval <= 0 {
		s.interval = config.DefaultWatchdogInterval
	}
	if s.remind <= 0 {
		s.remind = cfg.Watchdog.Remind.D()
	}
	if s.remind <= 0 {
		s.remind = config.DefaultWatchdogRemind
	}
	if cfg.Watchdog.To != "" {
		s.to = bot.ParseTargets(cfg.Watchdog.To) // checked when the config loaded
	} else {
		s.to = bot.ReportRooms(cfg)
	}
	for _, in := range cfg.Instances() {
		if in.Service.AutoRecover {
			s.auto[in.Name] = true // a replica's: its service's
		}
	}
	return s
}

// Run passes over the services every watchdog.interval (of the config in
// effect at each pass) while this process holds the watchdog lease, until
// ctx ends (then it returns nil). A holder that finds its lease lost stops
// before its next pass or alert and waits for it again.
func (w *Watchdog) Run(ctx context.Context) error {
	return leases.RunLeader(ctx, w.app.Leases, WatchdogLease, w.log, func(ctx context.Context, held func(context.Context) error) error {
		for {
			began := time.Now()
			set := w.settings()
			if _, err := w.pass(ctx, w.opts.Now(), set, held); err != nil {
				if errors.Is(err, leases.ErrLost) || ctx.Err() != nil {
					return err
				}
				w.log.Error("watchdog pass", "err", err)
			}
			if leases.SleepOrDone(ctx, set.interval-time.Since(began)) {
				return nil
			}
		}
	})
}

// PassReport says what one pass did.
type PassReport struct {
	Checked int      // services looked at
	Skipped []string // services held by a job, not looked at
	Opened  []int64  // incidents opened
	Closed  []int64  // incidents closed
}

// seen is one service's state in a pass.
type seen struct {
	service string
	res     *ops.Result
	err     error
}

// Pass looks at every service once, at now, and opens, edits, reminds or
// closes incidents. It returns an error only when it could not look at all
// (the store failed); a service it could not reach is an incident.
func (w *Watchdog) Pass(ctx context.Context, now time.Time) (PassReport, error) {
	return w.pass(ctx, now, w.settings(), nil)
}

func (w *Watchdog) pass(ctx context.Context, now time.Time, set watchSettings, held func(context.Context) error) (PassReport, error) {
	var rep PassReport
	if held != nil {
		if err := held(ctx); err != nil {
			return rep, err
		}
	}
	leases, err := w.app.Store.Leases(ctx)
	if err != nil {
		return rep, fmt.Errorf("watchdog: %w", err)
	}
	// A lease's expiry is by the store's clock (the database's on
	// PostgreSQL), as the processes that took it judge it.
	storeNow := w.app.Store.Clock()()
	busy := map[string]bool{}
	for _, l := range leases {
		if svc, ok := strings.CutPrefix(l.Key, "service:"); ok && l.ExpiresAt.After(storeNow) {
			busy[svc] = true
		}
	}
	silenced, err := w.app.Store.Silences(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("watchdog: %w", err)
	}
	open, err := w.app.Store.OpenIncidents(ctx)
	if err != nil {
		return rep, fmt.Errorf("watchdog: %w", err)
	}
	openOf := map[string]store.Incident{}
	for _, in := range open {
		openOf[in.Service] = in
	}
	var look []string
	for _, name := range set.services {
		if busy[name] {
			rep.Skipped = append(rep.Skipped, name)
			continue
		}
		look = append(look, name)
	}
	results := make([]seen, len(look))
	var wg sync.WaitGroup
	sem := make(chan struct{}, w.opts.Parallel)
	for i, name := range look {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = w.look(ctx, name)
		}()
	}
	wg.Wait()
	rep.Checked = len(look)
	for _, s := range results {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		if held != nil {
			if err := held(ctx); err != nil {
				return rep, err
			}
		}
		kind, state := classify(s)
		if kind == IncidentDown && w.stoppedOnPurpose(ctx, s) {
			kind = ""
		}
		in, isOpen := openOf[s.service]
		switch {
		case kind == "" && isOpen:
			if w.close(ctx, in, state, now) {
				rep.Closed = append(rep.Closed, in.ID)
			}
		case kind == "":
		case isOpen:
			w.evolve(ctx, in, kind, state, now, silenced[s.service], set.remind)
		case silenced[s.service].Until.After(now):
			w.log.Info("watchdog: a silenced service is not well", "service", s.service, "kind", kind, "state", state)
		default:
			if id := w.open(ctx, s, kind, state, now, set); id != 0 {
				rep.Opened = append(rep.Opened, id)
			}
		}
	}
	if hw := w.hwSettings(); hw.on {
		if held != nil {
			if err := held(ctx); err != nil {
				return rep, err
			}
		}
		w.hardwarePass(ctx, now, set, hw, silenced, openOf, &rep)
	}
	return rep, nil
}

// look runs `svc status` on one service (a read: no job, no hold).
func (w *Watchdog) look(ctx context.Context, name string) seen {
	res, err := w.backend().Run(ctx, ops.JobHold{}, &commands.SvcStatus{On: commands.On{Service: name}}, ops.Discard)
	return seen{service: name, res: res, err: err}
}

func (w *Watchdog) backend() jobs.Backend { return w.app.Engine.Backend() }

// classify says which incident s is ("" when the service is well) and the
// state line that shows what was seen.
func classify(s seen) (kind, state string) {
	if s.err != nil || s.res == nil || s.res.Service == nil {
		err := s.err
		if err == nil {
			err = errors.New("no state returned")
		}
		return IncidentUnreachable, fmt.Sprintf("could not read its state: %v", err)
	}
	st := s.res.Service
	state = fmt.Sprintf("%s/%s, NRestarts %d, engine %s (%s on %s)", st.ActiveState, st.SubState, st.NRestarts, st.Ready, st.Unit, st.Host)
	switch {
	case slices.Contains(s.res.Incidents, ops.IncidentRestartLoop):
		return IncidentLoop, state
	case st.ActiveState == "failed" || st.ActiveState == "inactive":
		return IncidentDown, state
	case st.ActiveState == "active" && st.Ready == "error":
		return IncidentUnhealthy, state
	}
	return "", state
}

// stoppedOnPurpose reports whether an inactive service was last stopped by
// a `svc stop` job of the bot (not failed): that is no incident.
func (w *Watchdog) stoppedOnPurpose(ctx context.Context, s seen) bool {
	if s.res == nil || s.res.Service == nil || s.res.Service.ActiveState != "inactive" {
		return false
	}
	jobs, err := w.app.Store.ListJobs(ctx, store.JobFilter{Service: s.service, Limit: 20})
	if err != nil {
		return false
	}
	for _, j := range jobs { // newest first: the last job that changed the service's state
		if j.Status != store.Succeeded {
			continue
		}
		cmd, err := w.app.Dispatcher.JobCommand(j)
		if err != nil || !commands.Mutates(cmd) {
			continue
		}
		switch c := cmd.(type) {
		case *commands.SvcStop:
			return true
		case *commands.GPURecover:
			return c.NoStart
		}
		return false
	}
	return false
}

var kindWords = map[string]string{
	IncidentLoop:        "is in a restart loop",
	IncidentDown:        "is down",
	IncidentUnhealthy:   "runs but its engine's health check fails",
	IncidentUnreachable: "cannot be checked",
}

// diagnose reads the journal's diagnosis of the service, as `svc logs` gives it.
func (w *Watchdog) diagnose(ctx context.Context, service string) string {
	res, err := w.backend().Run(ctx, ops.JobHold{}, &commands.SvcLogs{On: commands.On{Service: service}, Lines: 200}, ops.Discard)
	if err != nil || res == nil {
		return ""
	}
	for _, d := range res.Details {
		if strings.HasPrefix(d, "known cause") {
			return d
		}
	}
	return ""
}

// open opens an incident for s, posts its alert and offers (or, with
// auto_recover, starts) the recovery. It returns the incident's id, or 0
// when another process opened it first or the store failed.
func (w *Watchdog) open(ctx context.Context, s seen, kind, state string, now time.Time, set watchSettings) int64 {
	diag := w.diagnose(ctx, s.service)
	body := alertBody(s.service, kind, state, diag, now)
	in, opened, err := w.app.Store.OpenIncident(ctx, store.Incident{Service: s.service, Kind: kind, Summary: body, OpenedAt: now})
	if err != nil {
		w.log.Error("watchdog: open incident", "service", s.service, "err", err)
		return 0
	}
	if !opened {
		return 0
	}
	w.log.Warn("watchdog: incident opened", "incident", in.ID, "service", s.service, "kind", kind, "state", state)
	for _, t := range set.to {
		c := w.app.Engine.Chats()[t.Platform]
		if c == nil {
			w.log.Warn("watchdog: no chat for an alert room", "platform", t.Platform, "room", t.Room)
			continue
		}
		ref, err := c.Post(ctx, t.Room, bot.Message{Kind: bot.KindStatus, Text: bot.AlertText(in, now)})
		if err != nil {
			w.log.Error("watchdog: post alert", "platform", t.Platform, "room", t.Room, "err", err)
			continue
		}
		in.Alerts = append(in.Alerts, store.AlertRef{Platform: t.Platform, Room: ref.Room, ID: ref.ID})
	}
	w.recover(ctx, &in, set)
	if err := w.app.Store.UpdateIncident(ctx, in, now); err != nil {
		w.log.Error("watchdog: record alerts", "incident", in.ID, "err", err)
	}
	return in.ID
}

// recover starts `gpu recover` for a service with auto_recover, once per
// incident, through the door as the watchdog (WatchdogRun), or offers it in
// each alert's thread.
func (w *Watchdog) recover(ctx context.Context, in *store.Incident, set watchSettings) {
	text := "gpu recover " + in.Service
	if set.auto[in.Service] {
		if in.RecoverJob != 0 {
			return
		}
		r := w.app.Dispatcher.Handle(ctx, bot.Request{Platform: bot.PlatformWatchdog, User: bot.WatchdogUser, UserName: bot.WatchdogUserName,
			Text: text, Watchdog: &bot.WatchdogRun{Incident: in.ID, Service: in.Service, To: set.to}})
		note := fmt.Sprintf("auto_recover: started job #%d `%s` (`job %d` follows it)", r.JobID, text, r.JobID)
		if r.Outcome != bot.Queued {
			note = fmt.Sprintf("auto_recover: `%s` was not started: %s", text, r.Text)
		}
		in.RecoverJob = r.JobID
		w.replyAll(ctx, *in, note)
		return
	}
	for _, a := range in.Alerts {
		r := w.app.Dispatcher.ProposeForIncident(ctx, a.Platform, a.Room, text, in.ID)
		m := bot.Message{Kind: bot.KindStep, Text: fmt.Sprintf("To recover: `%s` (stop, clear the service's GPU memory, start fresh).", text)}
		if r.Outcome == bot.NeedsConfirm {
			m.Text, m.Actions = r.Text, r.Actions
		}
		if c := w.app.Engine.Chats()[a.Platform]; c != nil {
			if _, err := c.Reply(ctx, bot.Ref{Room: a.Room, ID: a.ID}, m); err != nil {
				w.log.Warn("watchdog: offer recovery", "incident", in.ID, "err", err)
			}
		}
	}
}

// evolve edits an open incident's alerts when what is seen changed, and
// reminds when it is unacknowledged for remind.
func (w *Watchdog) evolve(ctx context.Context, in store.Incident, kind, state string, now time.Time, sil store.SilenceInfo, remind time.Duration) {
	changed := false
	if first, _, _ := strings.Cut(in.Summary, "\n"); in.Kind != kind || !strings.Contains(first, state) {
		diag := w.diagnose(ctx, in.Service)
		in.Kind, in.Summary = kind, alertBody(in.Service, kind, state, diag, now)
		changed = true
	}
	due := in.AckedBy == "" && !sil.Until.After(now) && now.Sub(lastOf(in.RemindedAt, in.OpenedAt)) >= remind
	if !changed && !due {
		return
	}
	if due {
		in.RemindedAt = now
		w.replyAll(ctx, in, fmt.Sprintf("reminder: %s still %s (since %s, %s). `ack %d` stops these reminders.",
			in.Service, kindWords[kind], report.Stamp(in.OpenedAt), now.Sub(in.OpenedAt).Round(time.Minute), in.ID))
	}
	if err := w.app.Store.UpdateIncident(ctx, in, now); err != nil {
		w.log.Error("watchdog: update incident", "incident", in.ID, "err", err)
		return
	}
	if changed {
		bot.EditAlerts(ctx, w.app.Engine.Chats(), in, false, w.log)
	}
}

func lastOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// close closes an incident whose service is well again and edits its alerts.
func (w *Watchdog) close(ctx context.Context, in store.Incident, state string, now time.Time) bool {
	summary := fmt.Sprintf("%s serves again: %s. Seen well at %s, %s after the alert.", in.Service, state, report.Stamp(now),
		now.Sub(in.OpenedAt).Round(time.Second))
	_, rest, _ := strings.Cut(in.Summary, "\n")
	in.Summary = summary + "\nwas: " + strings.ReplaceAll(rest, "\n", "\nwas: ")
	if err := w.app.Store.CloseIncident(ctx, in.ID, in.Summary, now); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			w.log.Error("watchdog: close incident", "incident", in.ID, "err", err)
		}
		return false
	}
	in.ClosedAt = now
	w.log.Info("watchdog: incident closed", "incident", in.ID, "service", in.Service)
	bot.EditAlerts(ctx, w.app.Engine.Chats(), in, true, w.log)
	return true
}

// replyAll posts text in the thread of each of the incident's alerts.
func (w *Watchdog) replyAll(ctx context.Context, in store.Incident, text string) {
	for _, a := range in.Alerts {
		c := w.app.Engine.Chats()[a.Platform]
		if c == nil {
			continue
		}
		if _, err := c.Reply(ctx, bot.Ref{Room: a.Room, ID: a.ID}, bot.Message{Kind: bot.KindStep, Text: text}); err != nil {
			w.log.Warn("watchdog: reply to alert", "incident", in.ID, "err", err)
		}
	}
}

// alertBody is what an alert says about the service: the state line first
// (what was seen), then the diagnosis and the commands that help.
func alertBody(service, kind, state, diag string, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s (seen %s)\n", service, kindWords[kind], state, report.Stamp(now))
	if diag != "" {
		fmt.Fprintf(&b, "diagnosis: %s\n", diag)
	}
	switch kind {
	case IncidentUnreachable:
		fmt.Fprintf(&b, "now: unknown: opsbot cannot reach its host\nnext: `svc status %s` once the host answers", service)
	default:
		fmt.Fprintf(&b, "now: %s does not serve\nnext: `gpu recover %s` (offered in the thread); `svc logs %s` shows why", service, service, service)
	}
	return b.String()
}
