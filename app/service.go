// Package app runs the assembled bot as `opsbot serve` does: StartService
// starts the Scheduler (schedule) and the Watchdog on the App, each on the
// holder of its store lease, and the retention prune, and Stop stops them
// in order; RestartOnly lists what a reload cannot change. It stands above
// the door (bot) and the scheduler, so that neither imports the other's
// wiring.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/schedule"
	"github.com/opsbot/opsbot/watchdog"
)

// RestartOnly lists the config keys whose change from old to cfg takes
// effect only at the next restart: the store, the listener, the log,
// the limits and which adapters run.
func RestartOnly(old, cfg *config.Config) []string {
	var keys []string
	for key, same := range map[string]bool{
		"store":                cfg.Store.Driver == old.Store.Driver && cfg.Store.Path == old.Store.Path && cfg.Store.URL == old.Store.URL && cfg.Store.MaxConns == old.Store.MaxConns,
		"http.listen":          cfg.HTTP.Listen == old.HTTP.Listen,
		"http.trusted_proxies": slices.Equal(cfg.HTTP.TrustedProxies, old.HTTP.TrustedProxies),
		"log":                  cfg.Log == old.Log,
		"limits":               cfg.Limits == old.Limits,
		"adapters":             fmt.Sprint(cfg.EnabledAdapters()) == fmt.Sprint(old.EnabledAdapters()),
	} {
		if !same {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys
}

// Service is an App run as `opsbot serve` runs it: the scheduler and the
// watchdog, each on the holder of its store lease, and the retention
// prune, until Stop stops everything in order.
type Service struct {
	app     *bot.App
	log     *slog.Logger
	cancel  context.CancelFunc
	leaders sync.WaitGroup
}

// ServiceOptions configure a Service.
type ServiceOptions struct {
	Logger *slog.Logger
	// Regressions, when set, judges scheduled runs' benchmarks.
	Regressions *report.RegressionPolicy
	// Retention is how long job events and audit entries are kept
	// (store.retention); 0 keeps them.
	Retention time.Duration
	// SchedulerScale, when set, runs the scheduler's clock faster
	// (tests and benchmarks only; see TimeScale).
	SchedulerScale *schedule.TimeScale
}

// StartService starts app's scheduler, watchdog and retention prune.
func StartService(ctx context.Context, app *bot.App, o ServiceOptions) (*Service, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	sched, err := schedule.NewScheduler(ctx, app, schedule.SchedulerOptions{Logger: log, Regressions: o.Regressions, Scale: o.SchedulerScale})
	if err != nil {
		return nil, fmt.Errorf("start the scheduler: %w", err)
	}
	wd, err := watchdog.NewWatchdog(app, watchdog.WatchdogOptions{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	leaders, cancel := context.WithCancel(context.Background())
	s := &Service{app: app, log: log, cancel: cancel}
	for _, run := range []func(context.Context) error{sched.Run, wd.Run} {
		s.leaders.Go(func() {
			if err := run(leaders); err != nil {
				log.Error("scheduler or watchdog stopped", "err", err)
			}
		})
	}
	if o.Retention > 0 {
		s.leaders.Go(func() { s.prune(leaders, o.Retention) })
	}
	return s, nil
}

// Stop stops the service in order: it takes no new work (requests are
// answered RestartingText), stops the scheduler and the watchdog (their
// leases released while the store is open, so a standby takes them at
// once), lets the running jobs reach their safe points within grace, then
// releases the job leases and closes the store (App.Shutdown).
func (s *Service) Stop(grace time.Duration) error {
	s.app.Dispatcher.Drain()
	s.cancel()
	s.leaders.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return s.app.Shutdown(ctx)
}

// prune deletes job events and audit entries older than retention, now and
// then once a day, until ctx ends.
func (s *Service) prune(ctx context.Context, retention time.Duration) {
	t := time.NewTicker(24 * time.Hour)
	defer t.Stop()
	for {
		p, err := s.app.Store.Prune(ctx, time.Now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("prune the store", "err", err)
		case err == nil && (p.Events > 0 || p.Audit > 0 || p.Firings > 0):
			s.log.Info("pruned the store", "events", p.Events, "audit_entries", p.Audit, "schedule_firings", p.Firings, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
