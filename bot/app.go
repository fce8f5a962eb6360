package bot

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/store"
)

// App is the assembled bot: store, auth, job engine and dispatcher.
type App struct {
	Config     *config.Config
	Store      *store.Store
	Engine     *Engine
	Dispatcher *Dispatcher
	// Interrupted lists the jobs a previous process left unfinished.
	Interrupted []store.Job
}

// AppOptions are what NewApp needs beyond the config.
type AppOptions struct {
	Backend Backend
	Chats   map[string]Chat
	Logger  *slog.Logger
}

// NewApp opens the store, marks jobs left running by a previous process as
// interrupted (telling their rooms), and returns a bot ready to take requests.
func NewApp(ctx context.Context, cfg *config.Config, o AppOptions) (*App, error) {
	auth, err := NewAuth(cfg.Auth.DefaultRole, cfg.Auth.Users)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.Store.Path)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	eng := NewEngine(EngineOptions{Store: st, Backend: o.Backend, Chats: o.Chats, JobTimeout: cfg.Limits.JobTimeout.D(), Logger: o.Logger})
	interrupted, err := eng.RecoverInterrupted(ctx)
	if err != nil {
		st.Close()
		return nil, err
	}
	opts := commands.Options{MaxSteps: cfg.Limits.MaxSteps, Hosts: cfg.HostNames()}
	for _, name := range cfg.ServiceNames() {
		opts.Services = append(opts.Services, commands.ServiceRef{Name: name, Host: cfg.Services[name].Host})
	}
	d := NewDispatcher(DispatcherOptions{Store: st, Engine: eng, Auth: auth, Commands: opts,
		ConfirmTTL: cfg.Limits.ConfirmTTL.D(), Logger: o.Logger})
	return &App{Config: cfg, Store: st, Engine: eng, Dispatcher: d, Interrupted: interrupted}, nil
}

// Close stops every job (they end cancelled) and closes the store.
func (a *App) Close() error {
	a.Engine.Close()
	return a.Store.Close()
}
