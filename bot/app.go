package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
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

var _ Inbound = (*App)(nil)

// Handle is the Dispatcher's Handle.
func (a *App) Handle(ctx context.Context, req Request) Reply { return a.Dispatcher.Handle(ctx, req) }

// Act is the Dispatcher's Act.
func (a *App) Act(ctx context.Context, act ActionRequest) Reply { return a.Dispatcher.Act(ctx, act) }

// Parse parses text as Handle would, without acting.
func (a *App) Parse(text string) (*commands.Command, error) { return a.Dispatcher.Parse(text) }

// Active returns the ids of jobs queued or running in this process.
func (a *App) Active() []int64 { return a.Engine.Active() }

// JobOutcome is how a job ended, as Go values.
type JobOutcome struct {
	ID      int64
	Command string
	Status  store.Status
	Error   string // why it failed, was refused or cancelled; "" when it succeeded
	Events  []ops.Event
	Result  *ops.Result // nil when the pipeline returned none
}

// Succeeded reports whether the job succeeded.
func (o JobOutcome) Succeeded() bool { return o.Status == store.Succeeded }

// Wait blocks until job id has ended (or ctx ends) and returns its outcome:
// the final state, every event and the pipeline's result. A job another
// process runs is returned as it stands.
func (a *App) Wait(ctx context.Context, id int64) (JobOutcome, error) {
	res, ran, err := a.Engine.result(ctx, id)
	if err != nil {
		return JobOutcome{ID: id}, fmt.Errorf("wait for job #%d: %w", id, err)
	}
	j, err := a.Store.Job(ctx, id)
	if err != nil {
		return JobOutcome{ID: id}, fmt.Errorf("read job #%d: %w", id, err)
	}
	o := JobOutcome{ID: j.ID, Command: j.Command, Status: j.Status, Error: j.Error, Result: res}
	if !ran && len(j.Result) > 0 {
		// A job of an earlier process: its result as the store keeps it.
		var r ops.Result
		if err := json.Unmarshal(j.Result, &r); err != nil {
			return o, fmt.Errorf("read the result of job #%d: %w", id, err)
		}
		o.Result = &r
	}
	evs, err := a.Store.Events(ctx, id)
	if err != nil {
		return o, fmt.Errorf("read the events of job #%d: %w", id, err)
	}
	o.Events = make([]ops.Event, 0, len(evs))
	for _, e := range evs {
		o.Events = append(o.Events, ops.Event{At: e.At, Step: e.Step, Status: ops.StepStatus(e.Status), Message: e.Message})
	}
	return o, nil
}

// Close stops every job (they end cancelled) and closes the store.
func (a *App) Close() error {
	a.Engine.Close()
	return a.Store.Close()
}
