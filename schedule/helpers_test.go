package schedule

// The door's test doubles, as bot's tests have them: a recording chat, a
// pipeline as a function, and Apps on the lab.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// recChat records what the bot sends. It is the bot's own Chat interface
// implemented in memory (the real adapters have their own tests against real
// servers); every call is kept so tests can assert on the thread.
type recChat struct {
	mu    sync.Mutex
	n     int
	posts []bot.Message
	edits map[string][]bot.Message
	reps  map[string][]bot.Message
}

func newRecChat() *recChat {
	return &recChat{edits: map[string][]bot.Message{}, reps: map[string][]bot.Message{}}
}

func (c *recChat) Post(_ context.Context, room string, m bot.Message) (bot.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.posts = append(c.posts, m)
	return bot.Ref{Room: room, ID: fmt.Sprint(c.n)}, nil
}

func (c *recChat) Edit(_ context.Context, ref bot.Ref, m bot.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.edits[ref.ID] = append(c.edits[ref.ID], m)
	return nil
}

func (c *recChat) Reply(_ context.Context, ref bot.Ref, m bot.Message) (bot.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.reps[ref.ID] = append(c.reps[ref.ID], m)
	return bot.Ref{Room: ref.Room, ID: fmt.Sprint(c.n)}, nil
}

func (c *recChat) thread(id string) (edits, replies []bot.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]bot.Message(nil), c.edits[id]...), append([]bot.Message(nil), c.reps[id]...)
}

// pipelineFunc is a Backend made of a function: the tests' own pipelines,
// for those that need not see the job's hold (heldFunc's do).
type pipelineFunc func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error)

func (f pipelineFunc) Run(ctx context.Context, _ ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	return f(ctx, cmd, rep)
}

func okBackend() pipelineFunc {
	return func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		rep.Report(ops.Event{Step: "work", Status: ops.StepStarted, Message: "doing " + commands.Text(cmd)})
		rep.Report(ops.Event{Step: "work", Status: ops.StepDone, Message: "done"})
		return &ops.Result{Summary: "all good"}, nil
	}
}

// leaseHeld returns nil when app's process holds lease key in the store now
// (by the store's clock), else an error: what the store says, for tests of
// which process leads.
func leaseHeld(ctx context.Context, app *bot.App, key string) error {
	ls, err := app.Store.Leases(ctx)
	if err != nil {
		return fmt.Errorf("check lease %s: %w", key, err)
	}
	for _, l := range ls {
		if l.Key == key && l.Owner == app.Leases.Owner().ID && l.ExpiresAt.After(app.Store.Clock()()) {
			return nil
		}
	}
	return fmt.Errorf("lease %s is not held by this process", key)
}

// labApp is an App on the lab over real SSH, as cmd/opsbot builds it from the
// lab's config plus extra YAML, with a recording chat as platform console.
func labApp(t testing.TB, l *lab.Lab, extra string) (*bot.App, *recChat) {
	t.Helper()
	path, err := l.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return topoApp(t, l.Topology(), path, extra)
}

// topoApp is labApp for any topology (a lab, or a fleet of them) whose
// config was written to path.
func topoApp(t testing.TB, topo lab.Topology, path, extra string) (*bot.App, *recChat) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, []byte(extra)...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	chat := newRecChat()
	newBackend := func(deps bot.BackendDeps) (jobs.Backend, error) {
		oc := labtest.OpsConfig(t, topo, 60*time.Second)
		oc.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 48}
		oc.MaxSteps, oc.NodeLocks = 16, deps.Nodes
		rb, err := ops.New(oc)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { rb.Close() })
		return jobs.RunbookBackend(rb), nil
	}
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{NewBackend: newBackend, Chats: map[string]bot.Chat{"console": chat}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return app, chat
}
