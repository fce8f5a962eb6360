package bot

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
)

// TestScheduleListAndTo: schedule add --to stores the targets and the
// creator; schedule list shows each schedule's next run in its own zone
// (CRON_TZ= or the config's timezone), who it runs as and where it reports.
func TestScheduleListAndTo(t *testing.T) {
	t.Parallel()
	app, _ := newSchedApp(t, filepath.Join(t.TempDir(), "opsbot.db"), jobtest.OK(), "timezone: Europe/Berlin\n")
	clock := testkit.NewClock(night)
	app.Dispatcher.opts.Now = clock.Now
	ctx := context.Background()
	for _, text := range []string{
		`schedule add --to console:oncall,slack:C0OPS "0 3 * * *" bench`,
		`schedule add "CRON_TZ=America/New_York 30 6 * * 1-5" bench`,
	} {
		if r := app.Dispatcher.Handle(ctx, Request{Platform: "console", User: "alice", Room: "ops", Text: text}); r.Outcome != Answered {
			t.Fatalf("%s: %s %s", text, r.Outcome, r.Text)
		}
	}
	list, _ := app.Store.Schedules(ctx)
	if len(list) != 2 || list[0].Targets != "console:oncall,slack:C0OPS" || list[0].Owner() != "console:alice" {
		t.Fatalf("%+v", list)
	}
	r := app.Dispatcher.Handle(ctx, Request{Platform: "console", User: "vic", Room: "ops", Text: "schedule list"})
	for _, want := range []string{
		"next 2026-12-04 03:00 CET · never run · as console:alice · to console:oncall,slack:C0OPS",
		"next 2026-12-03 06:30 EST · never run · as console:alice · to console:ops",
	} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("schedule list lacks %q:\n%s", want, r.Text)
		}
	}
}
