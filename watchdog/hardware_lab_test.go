package watchdog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
)

// A new paging XID on one of qwen's GPUs raises one alert naming the GPU,
// the service on it and the verdict; later passes post no second alert; an
// XID that does not page (13, the software's) raises none; `ack` stops the
// reminders; a silence of every service on the GPU keeps a new GPU's alert
// from opening.
func TestWatchdogAlertsOnceOnANewXID(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t, lab.Options{TimeScale: 1000})
	waitCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range []string{"qwen", "coder"} {
		if err := l.WaitReady(waitCtx, s); err != nil {
			t.Fatal(err)
		}
	}
	app, chat := apptest.Lab(t, l, "watchdog: {interval: 1m, to: \"console:oncall\", hardware: {xids: [48, 79, 95]}}\n")
	ctx := context.Background()
	clock := testkit.NewClock(night)
	w, err := NewWatchdog(app, WatchdogOptions{Now: clock.Now, Remind: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := w.Pass(ctx, clock.Now()); err != nil || len(rep.Opened) != 0 {
		t.Fatalf("healthy pass: %+v %v", rep, err)
	}
	if err := l.InjectXID(6, 13); err != nil { // not in watchdog.hardware.xids
		t.Fatal(err)
	}
	clock.Add(time.Minute)
	if rep, err := w.Pass(ctx, clock.Now()); err != nil || len(rep.Opened) != 0 {
		t.Fatalf("pass after Xid 13: %+v %v", rep, err)
	}
	if err := l.InjectXID(2, 95); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute)
	rep, err := w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 1 {
		t.Fatalf("pass after Xid 95: %+v %v", rep, err)
	}
	in, err := app.Store.Incident(ctx, rep.Opened[0])
	if err != nil || in.Kind != IncidentHardware || !bot.IsHardwareKey(in.Service) || len(in.Alerts) != 1 {
		t.Fatalf("incident %+v %v", in, err)
	}
	posts := chat.Posts()
	if len(posts) != 1 {
		t.Fatalf("%d posts, want one alert", len(posts))
	}
	for _, want := range []string{"GPU 2 of pve", "serving qwen", "reset needed", "new Xid 95 (Uncontained ECC error)",
		"1 new uncorrected ECC errors", "`gpu health pve`", "`ack 1`"} {
		if !strings.Contains(posts[0].Text, want) {
			t.Errorf("alert lacks %q:\n%s", want, posts[0].Text)
		}
	}
	if strings.Contains(posts[0].Text, "coder") {
		t.Errorf("the alert names coder, whose GPUs are fine:\n%s", posts[0].Text)
	}
	// The next passes: still reset needed, no second alert, no reminder
	// before an hour.
	for i := 0; i < 2; i++ {
		clock.Add(time.Minute)
		if rep, err := w.Pass(ctx, clock.Now()); err != nil || len(rep.Opened) != 0 || len(rep.Closed) != 0 {
			t.Fatalf("pass %d after the alert: %+v %v", i, rep, err)
		}
	}
	if n := len(chat.Posts()); n != 1 {
		t.Fatalf("%d posts after more passes, want the one alert", n)
	}
	// Acknowledged, it reminds no more.
	r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "oncall", Text: "ack 1"})
	if r.Outcome == bot.Refused || r.Outcome == bot.Invalid {
		t.Fatalf("ack: %s %s", r.Outcome, r.Text)
	}
	clock.Add(2 * time.Hour)
	if _, err := w.Pass(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, replies := chat.Thread(in.Alerts[0].ID); hasReminder(replies) {
		t.Fatalf("a reminder after ack: %+v", replies)
	}
	// coder silenced: an Xid 79 on its GPU 5 opens nothing.
	r = app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "oncall", Text: "watchdog silence coder 2h"})
	if r.Outcome == bot.Refused || r.Outcome == bot.Invalid {
		t.Fatalf("silence: %s %s", r.Outcome, r.Text)
	}
	if err := l.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute)
	if rep, err := w.Pass(ctx, clock.Now()); err != nil || len(rep.Opened) != 0 {
		t.Fatalf("pass after Xid 79 on silenced coder's GPU: %+v %v", rep, err)
	}
}

func hasReminder(ms []bot.Message) bool {
	for _, m := range ms {
		if strings.HasPrefix(m.Text, "reminder:") {
			return true
		}
	}
	return false
}
