package bot

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// ErrRestarting is the error of a request refused because opsbot is
// stopping: its Reply says to try again in a minute.
var ErrRestarting = errors.New("opsbot is restarting")

// RestartingText is what a request gets while opsbot stops.
const RestartingText = "opsbot is restarting, try again in a minute"

func restarting() Reply {
	return Reply{Outcome: Failed, Text: RestartingText, Err: ErrRestarting}
}

// Drain makes Handle and Act refuse every later request with RestartingText;
// nothing already started is touched. It cannot be undone.
func (d *Dispatcher) Drain() { d.draining.Store(true) }

// Draining reports whether Drain was called.
func (d *Dispatcher) Draining() bool { return d.draining.Load() }

func (d *Dispatcher) commands() commands.Options { return *d.cmds.Load() }

// Reload makes later requests use auth's roles and cmds' services and hosts.
// Confirmations already asked and jobs already running keep what they had.
func (d *Dispatcher) Reload(auth *Auth, cmds commands.Options) {
	d.opts.Auth.Replace(auth)
	d.cmds.Store(&cmds)
}

// Reloader is an adapter that can take a new config without reconnecting
// (its allowlists: channels, rooms, users). `opsbot serve` calls Reload on
// SIGHUP, after the config checked; an error keeps the adapter's old
// settings and is logged.
type Reloader interface {
	Reload(cfg *config.Config) error
}

// Reload applies cfg's roles, services, hosts and rooms to later requests, and
// remembers cfg as the App's Config. A job already running goes on as it
// began. What only a restart changes (the store's path, limits, the
// listener) is left as it was. cfg must have been loaded by config.Load.
func (a *App) Reload(cfg *config.Config) error {
	auth, err := AuthFromConfig(cfg)
	if err != nil {
		return err
	}
	a.Dispatcher.Reload(auth, cfg.CommandOptions())
	a.Dispatcher.SetAdmissions(AdmissionsFromConfig(cfg))
	a.Dispatcher.SetReportRooms(ReportRooms(cfg))
	a.mu.Lock()
	a.Config = cfg
	a.mu.Unlock()
	return nil
}

// Shutdown stops the bot for a restart: the dispatcher refuses new requests
// (RestartingText), running jobs go on until soon before ctx's deadline
// (limits.shutdown_grace), then each is stopped at its next safe point
// (never inside a unit write with its daemon-reload, nor inside a start) and
// recorded as interrupted, its thread saying so. It returns once every job
// has recorded its final state, the leases are given up and the store is
// closed. A job inside a write or a start when the grace ends finishes that
// step first, so Shutdown may return after ctx's deadline by as long as the
// step takes (seconds); the caller's hard stop is a second signal.
func (a *App) Shutdown(ctx context.Context) error {
	a.Dispatcher.Drain()
	soft := ctx
	if dl, ok := ctx.Deadline(); ok {
		// Keep a quarter of the grace (at most 10 s) for the jobs to unwind.
		reserve := min(time.Until(dl)/4, 10*time.Second)
		var cancel context.CancelFunc
		soft, cancel = context.WithDeadline(ctx, dl.Add(-reserve))
		defer cancel()
	}
	a.Engine.Shutdown(soft)
	return a.Store.Close()
}

// safePoints tracks whether a job is inside a step that must not be cut in
// half, and stops the job at the end of that step when asked to stop.
type safePoints struct {
	mu      sync.Mutex
	open    map[string]bool // critical steps started and not yet ended
	stop    func()          // set by stopAtSafePoint while a step is open
	obs     Observer
	job     store.Job
	started map[string]time.Time
	forward ops.Reporter
}

// Report forwards ev to the job's thread, times the step for the observer,
// and stops the job once its last critical step ended if a stop is pending.
func (s *safePoints) Report(ev ops.Event) {
	s.forward.Report(ev)
	var stop func()
	s.mu.Lock()
	switch ev.Status {
	case ops.StepStarted:
		if ops.Critical(ev.Step) {
			s.open[ev.Step] = true
		}
		if s.obs != nil {
			s.started[ev.Step] = ev.At
		}
	case ops.StepDone, ops.StepFailed, ops.StepSkipped:
		delete(s.open, ev.Step)
		if len(s.open) == 0 && s.stop != nil {
			stop, s.stop = s.stop, nil
		}
		if t0, ok := s.started[ev.Step]; ok && s.obs != nil {
			delete(s.started, ev.Step)
			at := ev.At
			if at.IsZero() {
				at = time.Now()
			}
			s.obs.StepEnded(s.job, ev.Step, ev.Status, at.Sub(t0))
		}
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// stopAtSafePoint calls stop now when no critical step is open, else when
// the last open one ends; then it returns the steps it waits for.
func (s *safePoints) stopAtSafePoint(stop func()) (waitFor []string) {
	s.mu.Lock()
	if len(s.open) > 0 {
		s.stop = stop
		for step := range s.open {
			waitFor = append(waitFor, step)
		}
		s.mu.Unlock()
		return waitFor
	}
	s.mu.Unlock()
	stop()
	return nil
}

// Observer is told what the job engine does, for metrics. Its methods are
// called on the job's own path: they must be quick, must not block and must
// be safe for concurrent use. command is the command's name ("mtp steps").
type Observer interface {
	// JobQueued: a job was accepted and waits to run.
	JobQueued(j store.Job, command string)
	// JobStarted: it holds its service (after lockWait) and runs.
	JobStarted(j store.Job, command string, lockWait time.Duration)
	// StepEnded: one pipeline step ended (done, failed or skipped).
	StepEnded(j store.Job, step string, status ops.StepStatus, took time.Duration)
	// JobEnded: the job reached its final state after took (queue included);
	// res is the pipeline's result, nil when there is none. Called for every
	// job JobQueued was called for, once.
	JobEnded(j store.Job, command string, status store.Status, took time.Duration, res *ops.Result)
}
