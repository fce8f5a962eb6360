package watchdog

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/testkit"
)

// offerToken returns the confirm token of the recovery offered in the
// thread of the incident's first alert, checking that its buttons show no
// expiry.
func offerToken(t *testing.T, app *bot.App, chat *chatrec.Recorder, id int64) string {
	t.Helper()
	in, err := app.Store.Incident(context.Background(), id)
	if err != nil || len(in.Alerts) != 1 {
		t.Fatalf("incident %+v %v", in, err)
	}
	_, replies := chat.Thread(in.Alerts[0].ID)
	for _, r := range replies {
		if m := confirmRE.FindStringSubmatch(r.Text); m != nil {
			if !strings.Contains(r.Text, fmt.Sprintf("while incident #%d is open", id)) {
				t.Errorf("the offer does not say it holds while the incident is open: %q", r.Text)
			}
			for _, a := range r.Actions {
				if !a.Expires.IsZero() {
					t.Errorf("the offer's %s button expires at %s", a.Label, a.Expires)
				}
			}
			return m[1]
		}
	}
	t.Fatalf("no recovery offered in the thread of incident #%d: %+v", id, replies)
	return ""
}

// TestWatchdogOfferHoldsWhileIncidentOpen: the `gpu recover` an open
// alert offers is still good 20 minutes later (limits.confirm_ttl is 2m),
// after a restart of opsbot on the same store; a viewer's click is refused
// and leaves it offered; an operator's click runs it. The offer of an
// incident that closed answers that the incident closed, and runs nothing.
func TestWatchdogOfferHoldsWhileIncidentOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	hosts := newFakeHosts()
	clock := testkit.NewClock(night)
	ctx := context.Background()
	app1, chat1 := apptest.SchedAt(t, path, hosts, watchYAML, clock.Now)
	w1, err := NewWatchdog(app1, WatchdogOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	hosts.set("qwen", looping("qwen", 3))
	rep, err := w1.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 1 {
		t.Fatalf("pass: %+v %v", rep, err)
	}
	first := rep.Opened[0]
	tok := offerToken(t, app1, chat1, first)

	// Twenty minutes on, opsbot restarted: the alert is still open and its offer holds.
	clock.Add(20 * time.Minute)
	app1.Close()
	app2, _ := apptest.SchedAt(t, path, hosts, watchYAML, clock.Now)
	click := func(user, token string) bot.Reply {
		return app2.Dispatcher.Act(ctx, bot.ActionRequest{ID: "confirm:" + token, Platform: "console", User: user, Room: "oncall"})
	}
	if r := click("vic", tok); r.Outcome != bot.Refused {
		t.Fatalf("a viewer's click: %s %q, want refused", r.Outcome, r.Text)
	}
	r := click("olga", tok)
	if r.Outcome != bot.Queued {
		t.Fatalf("an operator's click 20 minutes on, after a restart: %s %q, want the recovery queued", r.Outcome, r.Text)
	}
	j, err := app2.Engine.Wait(ctx, r.JobID)
	if err != nil || j.Command != "gpu recover qwen" || j.Status != "succeeded" || hosts.recovers.Load() != 1 {
		t.Fatalf("the recovery: %+v %v (%d recoveries)", j, err, hosts.recovers.Load())
	}

	// A second loop, which heals by itself: once its incident closed, its
	// offer ends with it.
	w2, err := NewWatchdog(app2, WatchdogOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute)
	if rep, err := w2.Pass(ctx, clock.Now()); err != nil || len(rep.Closed) != 1 || rep.Closed[0] != first {
		t.Fatalf("pass after the recovery: %+v %v", rep, err)
	}
	hosts.set("qwen", looping("qwen", 2))
	clock.Add(time.Minute)
	rep, err = w2.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 1 {
		t.Fatalf("second loop: %+v %v", rep, err)
	}
	second := rep.Opened[0]
	chat2 := app2.Engine.Chats()["console"].(*chatrec.Recorder)
	tok2 := offerToken(t, app2, chat2, second)
	if pend, err := app2.Store.PendingConfirmations(ctx, "console", "oncall", clock.Now().Add(time.Hour)); err != nil || len(pend) != 1 || pend[0].Token != tok2 {
		t.Fatalf("pending an hour on, with incident #%d open: %+v %v", second, pend, err)
	}
	hosts.set("qwen", healthy("qwen"))
	clock.Add(time.Minute)
	if rep, err := w2.Pass(ctx, clock.Now()); err != nil || len(rep.Closed) != 1 || rep.Closed[0] != second {
		t.Fatalf("pass once healthy: %+v %v", rep, err)
	}
	r = click("olga", tok2)
	if r.Outcome != bot.Invalid || !strings.Contains(r.Text, fmt.Sprintf("incident #%d closed", second)) {
		t.Fatalf("a click on a closed incident's offer: %s %q", r.Outcome, r.Text)
	}
	if hosts.recovers.Load() != 1 {
		t.Fatalf("%d recoveries, want the one confirmed", hosts.recovers.Load())
	}
	if pend, err := app2.Store.PendingConfirmations(ctx, "console", "oncall", clock.Now()); err != nil || len(pend) != 0 {
		t.Fatalf("pending after the incident closed: %+v %v", pend, err)
	}
}
