package schedule

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/ops"
)

// TestConfigScheduleBelongsToTheConfig: a schedule of config.schedules
// may be paused and resumed from chat, but `schedule rm` refuses it, naming
// the config file, and changes nothing (a dry run too); a schedule added
// from chat is removed as before. Removing the entry from the file and
// syncing (what a reload does) removes the schedule. `schedule list` marks
// the config's.
func TestConfigScheduleBelongsToTheConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const entry = "schedules:\n  - {cron: \"0 3 * * *\", command: \"bench qwen\", as: \"console:alice\", to: \"console:ops\"}\n"
	path := filepath.Join(dir, "opsbot.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(jobtest.Config, filepath.Join(dir, "opsbot.db"), entry)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		return &ops.Result{Summary: "done"}, nil
	})
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{Backend: backend, Chats: map[string]bot.Chat{"console": chatrec.New()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	ctx := context.Background()
	if _, err := NewScheduler(ctx, app, SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := app.Store.Schedules(ctx)
	if err != nil || len(list) != 1 || list[0].ConfigKey == "" {
		t.Fatalf("schedules after the sync: %+v %v", list, err)
	}
	id := list[0].ID
	say := func(text string) bot.Reply {
		return app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "alice", Room: "ops", Text: text})
	}
	for _, text := range []string{fmt.Sprintf("schedule rm %d", id), fmt.Sprintf("schedule rm %d --dry-run", id)} {
		r := say(text)
		if r.Outcome != bot.Refused || r.Refusal != bot.RefusedConfig || !strings.Contains(r.Text, "comes from the config") ||
			!strings.Contains(r.Text, path) || !strings.Contains(r.Text, fmt.Sprintf("`schedule pause %d`", id)) {
			t.Fatalf("%s: %s %s %q", text, r.Outcome, r.Refusal, r.Text)
		}
	}
	if sc, err := app.Store.Schedule(ctx, id); err != nil || sc.Paused {
		t.Fatalf("the config's schedule after rm: %+v %v", sc, err)
	}
	for _, step := range []struct {
		text   string
		paused bool
	}{{fmt.Sprintf("schedule pause %d", id), true}, {fmt.Sprintf("schedule resume %d", id), false}} {
		if r := say(step.text); r.Outcome != bot.Answered {
			t.Fatalf("%s: %s %q", step.text, r.Outcome, r.Text)
		}
		if sc, err := app.Store.Schedule(ctx, id); err != nil || sc.Paused != step.paused {
			t.Fatalf("after %s: %+v %v", step.text, sc, err)
		}
	}
	// A chat schedule is chat's to remove.
	if r := say(`schedule add "0 4 * * *" bench qwen`); r.Outcome != bot.Answered {
		t.Fatalf("schedule add: %s %q", r.Outcome, r.Text)
	}
	list, _ = app.Store.Schedules(ctx)
	if len(list) != 2 {
		t.Fatalf("schedules: %+v", list)
	}
	chatID := list[1].ID
	// `schedule list` says which comes from the config.
	r := say("schedule list")
	lines := strings.Split(r.Text, "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], fmt.Sprintf("#%d ", id)) || !strings.Contains(lines[0], "from the config") ||
		strings.Contains(lines[1], "from the config") {
		t.Fatalf("schedule list: want the config's marked, the chat's not:\n%s", r.Text)
	}
	if r := say(fmt.Sprintf("schedule rm %d", chatID)); r.Outcome != bot.Answered || !strings.Contains(r.Text, "removed") {
		t.Fatalf("rm of a chat schedule: %s %q", r.Outcome, r.Text)
	}
	// Removed from the file, and synced as a reload does: gone.
	cfg2 := *cfg
	cfg2.Schedules = nil
	if err := app.Reload(&cfg2); err != nil {
		t.Fatal(err)
	}
	if err := SyncConfigSchedules(ctx, app, time.Now()); err != nil {
		t.Fatal(err)
	}
	if list, _ := app.Store.Schedules(ctx); len(list) != 0 {
		t.Fatalf("schedules after the entry left the config: %+v", list)
	}
}
