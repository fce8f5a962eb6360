package bot

import (
	"context"
	"errors"
	"github.com/opsbot/opsbot/auth"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
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
func (d *Dispatcher) Reload(auth *auth.Auth, cmds commands.Options) {
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
	auth, err := auth.FromConfig(cfg)
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
