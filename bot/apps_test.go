package bot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/jobs"
)

// The App on a store that bot's own tests build. The shared builders are
// internal/apptest's (schedule's and watchdog's tests use them), but
// apptest imports bot, so this package's internal tests cannot import it
// (an import cycle): they keep this copy of apptest.SchedConfig and
// apptest.Sched, and take the recording chat, the function backends and
// the clock from internal/chatrec, internal/jobtest and internal/testkit.

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
// with backend and a recording chat on platform console.
func newSchedApp(t *testing.T, path string, backend jobs.Backend, extra string) (*App, *chatrec.Recorder) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(schedConfig, path, extra)), t.TempDir(), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	chat := chatrec.New()
	app, err := NewApp(context.Background(), cfg, AppOptions{Backend: backend, Chats: map[string]Chat{"console": chat}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return app, chat
}

var night = time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC) // an hour before the nightly run
