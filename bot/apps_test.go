package bot

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/jobs"
)

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
func newSchedApp(t *testing.T, path string, backend jobs.Backend, extra string) (*App, *recChat) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(schedConfig, path, extra)), t.TempDir(), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	chat := newRecChat()
	app, err := NewApp(context.Background(), cfg, AppOptions{Backend: backend, Chats: map[string]Chat{"console": chat}})
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
func (c *fakeClock) set(t time.Time) { c.t.Store(&t) }
func (c *fakeClock) now() time.Time  { return *c.t.Load() }

var night = time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC) // an hour before the nightly run
