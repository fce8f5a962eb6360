package bot

import (
	"context"
	"fmt"
	"github.com/opsbot/opsbot/auth"
	"log/slog"
	"sync"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// App is the assembled bot: store, auth, job engine and dispatcher.
type App struct {
	Config     *config.Config
	Store      *store.Store
	Engine     *jobs.Engine
	Dispatcher *Dispatcher
	// Leases holds services and nodes across the opsbot processes that
	// share the store; it is also the runbook's ops.Locker for nodes.
	Leases *leases.Leases
	// Interrupted lists the jobs a previous process left unfinished.
	Interrupted []store.Job

	mu sync.Mutex // guards Config against Reload
}

// AppOptions are what NewApp needs beyond the config.
type AppOptions struct {
	Backend jobs.Backend
	// NewBackend, used when Backend is nil, builds the backend once the
	// store is open, with what its pipelines must use from the store.
	NewBackend func(deps BackendDeps) (jobs.Backend, error)
	// Chats are the platforms' chats by platform name. A Chat that is also
	// an auth.Membership supplies its platform's user groups to auth, one that is
	// an auth.RoomLevels its users' power levels in rooms.
	Chats  map[string]Chat
	Logger *slog.Logger
	// Observer, when set, is told of every job and step (metrics).
	Observer jobs.Observer
	// Now is the door's clock (the stale rule, confirmations' expiry);
	// time.Now when nil. Tests set it.
	Now func() time.Time
	// Opened, when set, is called once the store is open and this process
	// registered in it, before anything is posted (NewApp reports the jobs
	// a stopped process left): with the store and the runtime's one locker
	// (App.Leases). It hands them to what keeps state of its own in the
	// store, such as the Matrix adapter (its login, sync position and
	// device keys; its sync lease). An error stops NewApp.
	Opened func(st *store.Store, locker *leases.Leases) error
}

// BackendDeps are what a runbook built by AppOptions.NewBackend takes from
// the bot: the node locker (the store's leases) and the job history `mtp
// undo` reads.
type BackendDeps struct {
	Nodes   ops.Locker
	Changes ops.ChangeLog
	// LastJob is the newest job's id in the store when it opened (0: none).
	LastJob int64
	// NewHosts is set by the caller (not NewApp) when the hosts are built
	// anew at every start (the lab): the jobs up to LastJob ran on hosts
	// that are gone (ops.Config.RebuiltAfter).
	NewHosts bool
}

// NewApp opens the store, registers this process in it (with a heartbeat,
// limits.lease_ttl), marks the jobs of opsbot processes that died as
// interrupted (telling their rooms; a live process's jobs are left alone),
// and returns a bot ready to take requests.
func NewApp(ctx context.Context, cfg *config.Config, o AppOptions) (*App, error) {
	au, err := auth.FromConfig(cfg)
	if err != nil {
		return nil, err
	}
	for platform, c := range o.Chats {
		if m, ok := c.(auth.Membership); ok {
			au = au.WithMembership(platform, m)
		}
		if l, ok := c.(auth.RoomLevels); ok {
			au = au.WithRoomLevels(platform, l)
		}
	}
	st, err := store.OpenConfig(ctx, StoreConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	locker, err := leases.New(ctx, st, leases.Options{TTL: cfg.Limits.LeaseTTL.D(), Logger: o.Logger})
	if err != nil {
		st.Close()
		return nil, err
	}
	if o.Opened != nil {
		if err := o.Opened(st, locker); err != nil {
			locker.Close()
			st.Close()
			return nil, err
		}
	}
	backend := o.Backend
	if backend == nil && o.NewBackend != nil {
		deps := BackendDeps{Nodes: locker, Changes: ChangeLog{Store: st}}
		if last, err := st.ListJobs(ctx, store.JobFilter{Limit: 1}); err == nil && len(last) == 1 {
			deps.LastJob = last[0].ID
		}
		if backend, err = o.NewBackend(deps); err != nil {
			locker.Close()
			st.Close()
			return nil, err
		}
	}
	eng := jobs.NewEngine(jobs.EngineOptions{Store: st, Backend: backend, Chats: o.Chats, JobTimeout: cfg.Limits.JobTimeout.D(),
		Leases: locker, Logger: o.Logger, Observer: o.Observer})
	loc := time.UTC
	if cfg.Timezone != "" {
		if loc, err = time.LoadLocation(cfg.Timezone); err != nil {
			eng.Close()
			st.Close()
			return nil, fmt.Errorf("timezone %q: %w", cfg.Timezone, err)
		}
	}
	d := NewDispatcher(DispatcherOptions{Store: st, Engine: eng, Auth: au, Commands: cfg.CommandOptions(),
		ConfirmTTL: cfg.Limits.ConfirmTTL.D(), Logger: o.Logger, Timezone: loc, Now: o.Now, ConfigFile: cfg.File})
	d.SetAdmissions(AdmissionsFromConfig(cfg))
	d.SetReportRooms(ReportRooms(cfg))
	// After the door: an interrupted rollout is rolled back through it.
	interrupted, err := eng.RecoverInterrupted(ctx)
	if err != nil {
		eng.Close()
		st.Close()
		return nil, err
	}
	// Status messages that do not show their job's end yet (a crash, another
	// process's takeover) are edited now, from the store.
	eng.ShowFinals(ctx)
	return &App{Config: cfg, Store: st, Engine: eng, Dispatcher: d, Leases: locker, Interrupted: interrupted}, nil
}

// CurrentConfig is the config in effect: the one given to NewApp, or the
// last one Reload took.
func (a *App) CurrentConfig() *config.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Config
}

// Close stops every job at its next safe point (they end interrupted), gives up this process's
// leases and closes the store.
func (a *App) Close() error {
	a.Engine.Close()
	return a.Store.Close()
}

// StoreConfig is the store the config names (store.driver, store.path,
// store.url, store.max_conns), for store.OpenConfig.
func StoreConfig(cfg *config.Config) store.Config {
	return store.Config{Driver: cfg.Store.Driver, Path: cfg.Store.Path, URL: cfg.Store.URL.Value(), MaxConns: cfg.Store.MaxConns}
}
