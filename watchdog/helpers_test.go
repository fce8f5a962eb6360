package watchdog

// The door's test doubles, as bot's tests have them: a recording chat,
// Apps on a store or on the lab, and the injected clock.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
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

// schedConfig is a config whose hosts nothing dials: the tests' backends are
// the bot's own Backend interface implemented in memory, so that the
// scheduler's decisions can be driven by an injected clock.
const schedConfig = `
store: {path: %s}
ssh: {key_file: id_ed25519, known_hosts: known_hosts}
hosts:
  gpu1: {addr: "127.0.0.1:2222", user: root}
default_service: qwen
services:
  qwen: {host: gpu1, unit: sglang-qwen.service, url: "http://127.0.0.1:30000"}
auth:
  users:
    "console:alice": admin
    "console:olga": operator
    "console:vic": viewer
%s
`

// newSchedApp opens an App on the store at path (several Apps may share one)
// with backend and a recording chat on platform "test".
func newSchedApp(t *testing.T, path string, backend jobs.Backend, extra string) (*bot.App, *recChat) {
	t.Helper()
	return newSchedAppAt(t, path, backend, extra, nil)
}

// newSchedAppAt is newSchedApp whose door reads the clock now (time.Now
// when nil).
func newSchedAppAt(t *testing.T, path string, backend jobs.Backend, extra string, now func() time.Time) (*bot.App, *recChat) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(schedConfig, path, extra)), t.TempDir(), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	chat := newRecChat()
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{Backend: backend, Chats: map[string]bot.Chat{"console": chat}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return app, chat
}

// fakeClock is the scheduler's injected clock.
type fakeClock struct{ t atomic.Pointer[time.Time] }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.set(t)
	return c
}
func (c *fakeClock) set(t time.Time)     { c.t.Store(&t) }
func (c *fakeClock) now() time.Time      { return *c.t.Load() }
func (c *fakeClock) add(d time.Duration) { c.set(c.now().Add(d)) }

var night = time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC) // an hour before the nightly run
