package watchdog

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops/systemd"
)

// loopQwen puts qwen into the incident's restart loop behind the bot's back:
// with the orphans fault a stop leaves the workers holding GPU memory, so
// the next start loops. It returns once systemd has restarted it.
func loopQwen(t *testing.T, l *lab.Lab) {
	t.Helper()
	pool := labtest.Pool(t, l)
	svc := systemd.Service{R: labtest.Host(t, pool, "gpu1"), Unit: "sglang-qwen.service", Poll: 25 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WaitStopped(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		s, err := svc.Show(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.NRestarts >= 1 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("qwen did not loop: %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var confirmRE = regexp.MustCompile("`confirm ([0-9a-f]{32})`")

// TestWatchdogSeesOrphansLoopAlertsOnceAndCloses replays the incident on the
// lab with an injected clock: one pass after qwen fell into the orphans
// restart loop opens one incident with one alert to watchdog.to, naming the
// loop and the journal's diagnosis, with `gpu recover qwen` offered in its
// thread; later passes edit that alert and post no other; confirming the
// offer recovers qwen, and the next pass closes the alert. Its neighbour
// coder is never alerted on.
func TestWatchdogSeesOrphansLoopAlertsOnceAndCloses(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	l := labtest.Start(t, lab.Options{Faults: []lab.Fault{{Name: "orphans"}}, TimeScale: 50, LoadTime: 5 * time.Second})
	waitCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range []string{"qwen", "coder"} {
		if err := l.WaitReady(waitCtx, s); err != nil {
			t.Fatal(err)
		}
	}
	app, chat := apptest.Lab(t, l, "watchdog: {interval: 1m, to: \"console:oncall\"}\n")
	ctx := context.Background()
	clock := testkit.NewClock(night)
	w, err := NewWatchdog(app, WatchdogOptions{Now: clock.Now, Remind: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 0 || rep.Checked != 2 {
		t.Fatalf("healthy pass: %+v %v", rep, err)
	}
	loopQwen(t, l)
	clock.Add(time.Minute) // the next interval
	rep, err = w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 1 {
		t.Fatalf("pass after the loop: %+v %v", rep, err)
	}
	in, err := app.Store.Incident(ctx, rep.Opened[0])
	if err != nil || in.Service != "qwen" || in.Kind != IncidentLoop || len(in.Alerts) != 1 {
		t.Fatalf("incident %+v %v", in, err)
	}
	posts := chat.Posts()
	if len(posts) != 1 {
		t.Fatalf("%d posts, want one alert", len(posts))
	}
	alert := posts[0].Text
	for _, want := range []string{"incident #1: qwen is in a restart loop", "NRestarts", "diagnosis: known cause", "gpu_memory_held", "`ack 1`"} {
		if !strings.Contains(alert, want) {
			t.Errorf("alert lacks %q:\n%s", want, alert)
		}
	}
	_, replies := chat.Thread(in.Alerts[0].ID)
	if len(replies) != 1 || !strings.Contains(replies[0].Text, "gpu recover qwen") {
		t.Fatalf("thread: %+v", replies)
	}
	m := confirmRE.FindStringSubmatch(replies[0].Text)
	if m == nil {
		t.Fatalf("no confirm token offered: %q", replies[0].Text)
	}
	if len(replies[0].Actions) != 2 || replies[0].Actions[0].Kind != bot.ActConfirm || replies[0].Actions[0].ID != "confirm:"+m[1] {
		t.Fatalf("the offer's buttons: %+v", replies[0].Actions)
	}
	// Another pass while it still loops: no second alert.
	clock.Add(time.Minute)
	if rep, err = w.Pass(ctx, clock.Now()); err != nil || len(rep.Opened) != 0 {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
	if n := len(chat.Posts()); n != 1 {
		t.Fatalf("%d posts after a second pass, want the one alert", n)
	}
	// An operator in the room confirms the offer: gpu recover runs.
	r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "oncall", Text: "confirm " + m[1]})
	if r.Outcome != bot.Queued {
		t.Fatalf("confirm: %s %s", r.Outcome, r.Text)
	}
	// While the job holds qwen the watchdog leaves it alone.
	testkit.WaitFor(t, 10*time.Second, "the recover job to hold qwen", func() bool {
		rep, err := w.Pass(ctx, clock.Now())
		return err == nil && len(rep.Skipped) == 1 && rep.Skipped[0] == "qwen"
	})
	jctx, jcancel := context.WithTimeout(ctx, time.Minute)
	defer jcancel()
	j, err := app.Engine.Wait(jctx, r.JobID)
	if err != nil || j.Status != "succeeded" {
		t.Fatalf("gpu recover: %+v %v", j, err)
	}
	clock.Add(time.Minute)
	rep, err = w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Closed) != 1 || rep.Closed[0] != in.ID {
		t.Fatalf("pass after recovery: %+v %v", rep, err)
	}
	edits, _ := chat.Thread(in.Alerts[0].ID)
	last := edits[len(edits)-1]
	if !last.Final || !strings.Contains(last.Text, "incident #1 closed: qwen serves again") {
		t.Fatalf("last edit %+v", last)
	}
	for _, p := range chat.Posts()[1:] {
		if strings.Contains(p.Text, "incident") {
			t.Fatalf("a second alert was posted: %q", p.Text)
		}
	}
}
