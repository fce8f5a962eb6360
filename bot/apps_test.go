package bot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/jobs"
)

// The App on a store that bot's own tests build. The shared builders are
// internal/apptest's (schedule's and watchdog's tests use them), but
// apptest imports bot, so this package's internal tests cannot import it
// (an import cycle): they keep this copy of apptest.Sched, and take the
// config text, the recording chat, the function backends and the clock
// from internal/jobtest, internal/chatrec and internal/testkit.

// schedConfig is the config of bot's scheduled-job tests (jobtest.Config).
const schedConfig = jobtest.Config

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
