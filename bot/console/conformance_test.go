package console

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chattest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// terminal drives the conformance suite as `opsbot run` does: Run with the
// OS user olga (an operator), petra (another operator), sam (an operator of
// coder only) or mallory (no role). A terminal has no rooms
// to refuse and no deliveries to replay.
type terminal struct {
	app *bot.App
	out *testkit.Buffer // everything the runs printed
}

func (c terminal) Name() string        { return Platform }
func (c terminal) Store() *store.Store { return c.app.Store }
func (c terminal) HasRooms() bool      { return false }

func (c terminal) Send(t testing.TB, as chattest.User, _ chattest.Room, text string) chattest.Sent {
	user := map[chattest.User]string{chattest.Operator: "olga", chattest.NoRole: "mallory", chattest.Second: "petra",
		chattest.Scoped: "sam"}[as]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	Run(ctx, RunOptions{Bot: c.app, OSUser: user, Out: c.out, Err: c.out}, []string{text})
	return nil
}

// Said is what the runs printed, as the terminal shows it.
func (c terminal) Said(testing.TB) string { return c.out.String() }

func (terminal) Replay(testing.TB, chattest.Sent) bool { return false }

// TestConformance: the chat conformance suite through the terminal.
func TestConformance(t *testing.T) {
	l := labtest.Start(t, lab.Options{})
	path, err := l.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth = config.Auth{DefaultRole: "none", Users: map[string]config.Grant{"console:olga": config.RoleEverywhere("operator"),
		"console:petra": config.RoleEverywhere("operator"), "console:sam": {Roles: chattest.ScopedRoles}},
		TwoPerson: config.TwoPerson{Commands: []string{chattest.TwoPerson}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	out := &testkit.Buffer{}
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{Logger: log, Chats: map[string]bot.Chat{Platform: New(out)},
		NewBackend: func(deps bot.BackendDeps) (jobs.Backend, error) {
			rb, err := labtest.Runbook(t, l, deps.Nodes)
			if err != nil {
				return nil, err
			}
			return jobs.RunbookBackend(rb), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	chattest.Run(t, terminal{app: app, out: out})
}
