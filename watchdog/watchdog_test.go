package watchdog

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// fakeHosts is the bot's Backend implemented in memory: `svc status` and
// `svc logs` answer from a state the test sets, `gpu recover` makes the
// service well. The lab test (watchdog_lab_test.go) covers the real thing;
// these drive the watchdog's decisions (reminders, ack, silence,
// auto_recover, two processes) without waiting on engines.
type fakeHosts struct {
	mu       sync.Mutex
	state    map[string]ops.ServiceState
	recovers atomic.Int64
}

func newFakeHosts() *fakeHosts {
	return &fakeHosts{state: map[string]ops.ServiceState{"qwen": healthy("qwen")}}
}

func healthy(svc string) ops.ServiceState {
	return ops.ServiceState{Service: svc, Unit: "sglang-" + svc + ".service", Host: "gpu1", ActiveState: "active", SubState: "running", Ready: "ready"}
}

func (f *fakeHosts) set(svc string, s ops.ServiceState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[svc] = s
}

func (f *fakeHosts) Run(ctx context.Context, _ ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.state[commands.Where(cmd).Service]
	switch cmd.Spec().Path {
	case "svc status":
		res := &ops.Result{Service: &s}
		if s.NRestarts > 0 && s.ActiveState != "inactive" {
			res.Incidents = []string{ops.IncidentRestartLoop}
		}
		return res, nil
	case "svc logs":
		return &ops.Result{Details: []string{`known cause in these lines: gpu_memory_held: "RuntimeError: Not enough memory."`}}, nil
	case "gpu recover":
		f.recovers.Add(1)
		f.state[commands.Where(cmd).Service] = healthy(commands.Where(cmd).Service)
		return &ops.Result{Summary: "recovered"}, nil
	}
	return &ops.Result{}, nil
}

func looping(svc string, n int) ops.ServiceState {
	s := healthy(svc)
	s.ActiveState, s.SubState, s.NRestarts, s.Ready = "activating", "auto-restart", n, "refused"
	return s
}

func alerts(c *chatrec.Recorder) []bot.Message {
	var out []bot.Message
	for _, m := range c.Posts() {
		if m.Kind == bot.KindStatus && strings.Contains(m.Text, "incident #") {
			out = append(out, m)
		}
	}
	return out
}

var night = time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC) // an hour before the nightly run

const watchYAML = "watchdog: {to: \"console:oncall\"}\n"

// TestWatchdogTwoAppsAlertOnce: two processes on one store pass over the same
// looping service at once: one incident, one alert.
func TestWatchdogTwoAppsAlertOnce(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	hosts := newFakeHosts()
	a1, c1 := apptest.Sched(t, path, hosts, watchYAML)
	a2, c2 := apptest.Sched(t, path, hosts, watchYAML)
	clock := testkit.NewClock(night)
	w1, _ := NewWatchdog(a1, WatchdogOptions{Now: clock.Now})
	w2, _ := NewWatchdog(a2, WatchdogOptions{Now: clock.Now})
	hosts.set("qwen", looping("qwen", 3))
	ctx := context.Background()
	var wg sync.WaitGroup
	reps := make([]PassReport, 2)
	for i, w := range []*Watchdog{w1, w2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], _ = w.Pass(ctx, clock.Now())
		}()
	}
	wg.Wait()
	if n := len(reps[0].Opened) + len(reps[1].Opened); n != 1 {
		t.Fatalf("opened %d incidents: %+v", n, reps)
	}
	if n := len(alerts(c1)) + len(alerts(c2)); n != 1 {
		t.Fatalf("%d alerts posted, want 1", n)
	}
}

// TestWatchdogRemindsUntilAck: an unacknowledged alert is reminded every
// watchdog.remind in its thread; `ack N` records who and when, edits the
// alert, and stops the reminders; the alert is still edited as the service
// evolves.
func TestWatchdogRemindsUntilAck(t *testing.T) {
	t.Parallel()
	hosts := newFakeHosts()
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), hosts, "watchdog: {to: \"console:oncall\", remind: 20m}\n")
	clock := testkit.NewClock(night)
	w, _ := NewWatchdog(app, WatchdogOptions{Now: clock.Now})
	ctx := context.Background()
	hosts.set("qwen", looping("qwen", 2))
	rep, err := w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	in, _ := app.Store.Incident(ctx, rep.Opened[0])
	reminders := func() int {
		_, rs := chat.Thread(in.Alerts[0].ID)
		n := 0
		for _, r := range rs {
			if strings.HasPrefix(r.Text, "reminder:") {
				n++
			}
		}
		return n
	}
	for i := 1; i <= 6; i++ { // an hour at 10-minute passes
		clock.Add(10 * time.Minute)
		if _, err := w.Pass(ctx, clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n := reminders(); n != 3 {
		t.Fatalf("%d reminders in an hour with watchdog.remind 20m, want 3", n)
	}
	r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "oncall", Text: "ack 1"})
	if r.Outcome != bot.Answered || !strings.Contains(r.Text, "acknowledged by console:olga") {
		t.Fatalf("ack: %s %s", r.Outcome, r.Text)
	}
	edits, _ := chat.Thread(in.Alerts[0].ID)
	if last := edits[len(edits)-1]; !strings.Contains(last.Text, "acknowledged by console:olga at") {
		t.Fatalf("alert after ack: %q", last.Text)
	}
	hosts.set("qwen", looping("qwen", 9))
	for i := 0; i < 12; i++ {
		clock.Add(10 * time.Minute)
		if _, err := w.Pass(ctx, clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n := reminders(); n != 3 {
		t.Fatalf("%d reminders after the ack, want still 3", n)
	}
	edits, _ = chat.Thread(in.Alerts[0].ID)
	if last := edits[len(edits)-1]; !strings.Contains(last.Text, "NRestarts 9") {
		t.Fatalf("alert not edited as the loop went on: %q", last.Text)
	}
	if r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "vic", Room: "oncall", Text: "ack 1"}); r.Outcome != bot.Refused {
		t.Fatalf("a viewer's ack: %s", r.Outcome)
	}
}

// TestWatchdogSilence: a silenced service opens no alert; after the silence
// ends, the next pass alerts.
func TestWatchdogSilence(t *testing.T) {
	t.Parallel()
	hosts := newFakeHosts()
	clock := testkit.NewClock(night)
	app, chat := apptest.SchedAt(t, filepath.Join(t.TempDir(), "opsbot.db"), hosts, watchYAML, clock.Now)
	w, _ := NewWatchdog(app, WatchdogOptions{Now: clock.Now})
	ctx := context.Background()
	r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "ops", Text: "watchdog silence qwen 2h"})
	if r.Outcome != bot.Answered || !strings.Contains(r.Text, "silent on qwen until 2026-12-03 04:00 UTC") {
		t.Fatalf("silence: %s %q", r.Outcome, r.Text)
	}
	hosts.set("qwen", ops.ServiceState{Service: "qwen", ActiveState: "inactive", SubState: "dead"})
	for i := 0; i < 11; i++ {
		clock.Add(10 * time.Minute)
		if rep, err := w.Pass(ctx, clock.Now()); err != nil || len(rep.Opened) != 0 {
			t.Fatalf("pass during the silence: %+v %v", rep, err)
		}
	}
	clock.Add(10 * time.Minute)
	rep, err := w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 1 {
		t.Fatalf("pass after the silence: %+v %v", rep, err)
	}
	if a := alerts(chat); len(a) != 1 || !strings.Contains(a[0].Text, "qwen is down") {
		t.Fatalf("alerts %+v", a)
	}
}

// TestWatchdogAutoRecover: with services.qwen.auto_recover the watchdog
// starts gpu recover itself, once, and closes the incident once it serves.
func TestWatchdogAutoRecover(t *testing.T) {
	t.Parallel()
	hosts := newFakeHosts()
	extra := watchYAML
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), hosts, extra)
	svc := app.Config.Services["qwen"]
	svc.AutoRecover = true
	app.Config.Services["qwen"] = svc
	clock := testkit.NewClock(night)
	w, _ := NewWatchdog(app, WatchdogOptions{Now: clock.Now})
	ctx := context.Background()
	hosts.set("qwen", looping("qwen", 4))
	rep, err := w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Opened) != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	in, _ := app.Store.Incident(ctx, rep.Opened[0])
	if in.RecoverJob == 0 {
		t.Fatal("no recover job recorded")
	}
	if _, err := app.Engine.Wait(ctx, in.RecoverJob); err != nil {
		t.Fatal(err)
	}
	if hosts.recovers.Load() != 1 {
		t.Fatalf("%d recoveries", hosts.recovers.Load())
	}
	// `job N` says who decided it: the watchdog, under the config's key.
	view := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "alice", Room: "oncall", Text: fmt.Sprintf("job %d", in.RecoverJob)})
	want := fmt.Sprintf("started by the watchdog for incident #%d, without asking anyone: services.qwen.auto_recover is true in the config", in.ID)
	if !strings.Contains(view.Text, want) || strings.Contains(view.Text, "--yes") {
		t.Errorf("job %d lacks %q:\n%s", in.RecoverJob, want, view.Text)
	}
	clock.Add(time.Minute)
	rep, err = w.Pass(ctx, clock.Now())
	if err != nil || len(rep.Closed) != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	_, rs := chat.Thread(in.Alerts[0].ID)
	if len(rs) == 0 || !strings.Contains(rs[0].Text, "auto_recover: started job") {
		t.Fatalf("thread %+v", rs)
	}
}

// TestWatchdogActsOnTheConfigInEffect: a watchdog built before a reload
// (SIGHUP) looks at the services of the config in effect, and starts
// `gpu recover` of a service the reload added, with auto_recover, through
// the door as its own principal, parsed with the reloaded services: one job
// of user "opsbot", audited with the incident's reason, its thread in the
// watchdog's room.
func TestWatchdogActsOnTheConfigInEffect(t *testing.T) {
	t.Parallel()
	hosts := newFakeHosts()
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), hosts, watchYAML)
	clock := testkit.NewClock(night)
	w, _ := NewWatchdog(app, WatchdogOptions{Now: clock.Now})
	ctx := context.Background()

	cfg := *app.CurrentConfig()
	cfg.Services = maps.Clone(cfg.Services)
	coder := cfg.Services["qwen"]
	coder.Unit, coder.AutoRecover = "sglang-coder.service", true
	cfg.Services["coder"] = coder
	if err := app.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	hosts.set("coder", looping("coder", 4))
	rep, err := w.Pass(ctx, clock.Now())
	if err != nil || rep.Checked != 2 || len(rep.Opened) != 1 {
		t.Fatalf("pass after the reload: %+v %v", rep, err)
	}
	in, _ := app.Store.Incident(ctx, rep.Opened[0])
	if in.Service != "coder" || in.RecoverJob == 0 {
		t.Fatalf("incident %+v: want coder's, with its recover job", in)
	}
	j, err := app.Engine.Wait(ctx, in.RecoverJob)
	if err != nil {
		t.Fatal(err)
	}
	if j.Command != "gpu recover coder" || j.User != "opsbot" || j.Platform != "console" || j.Room != "oncall" || j.Status != store.Succeeded {
		t.Fatalf("recover job %+v", j)
	}
	rows, err := app.Store.Audit(ctx, store.AuditFilter{User: "opsbot"})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("watchdog incident #%d: services.coder.auto_recover", in.ID)
	if len(rows) != 1 || rows[0].Decision != want || rows[0].JobID != j.ID || rows[0].Command != "gpu recover coder" {
		t.Fatalf("audit %+v: want one row %q for job #%d", rows, want, j.ID)
	}
	_, rs := chat.Thread(in.Alerts[0].ID)
	if len(rs) == 0 || !strings.Contains(rs[0].Text, fmt.Sprintf("auto_recover: started job #%d", j.ID)) {
		t.Fatalf("thread %+v", rs)
	}
}

// TestWatchdogRunOnlyRecovers: the door lets the watchdog's principal start
// `gpu recover` of its incident's service and nothing else.
func TestWatchdogRunOnlyRecovers(t *testing.T) {
	t.Parallel()
	app, _ := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), newFakeHosts(), watchYAML)
	ctx := context.Background()
	run := &bot.WatchdogRun{Incident: 7, Service: "qwen", To: []bot.Target{{Platform: "console", Room: "oncall"}}}
	for _, text := range []string{"svc stop qwen", "mtp steps 10 qwen", "gpu recover other"} {
		r := app.Dispatcher.Handle(ctx, bot.Request{Platform: bot.PlatformWatchdog, User: "opsbot", Text: text, Watchdog: run})
		if r.Outcome != bot.Invalid || r.JobID != 0 {
			t.Errorf("the watchdog asked for %q: %s %q job %d", text, r.Outcome, r.Text, r.JobID)
		}
	}
	if r := app.Dispatcher.Handle(ctx, bot.Request{Platform: bot.PlatformWatchdog, User: "opsbot", Text: "gpu recover qwen"}); r.Outcome != bot.Invalid {
		t.Errorf("a watchdog request without its run: %s %q", r.Outcome, r.Text)
	}
	if jobs, _ := app.Store.ListJobs(ctx, store.JobFilter{}); len(jobs) != 0 {
		t.Errorf("jobs %+v, want none", jobs)
	}
}

// TestWatchdogStoppedOnPurposeIsNoIncident: a service an operator stopped
// with `svc stop` is inactive on purpose: no alert; the same state without
// such a job is an incident.
func TestWatchdogStoppedOnPurposeIsNoIncident(t *testing.T) {
	t.Parallel()
	hosts := newFakeHosts()
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), hosts, watchYAML)
	w, _ := NewWatchdog(app, WatchdogOptions{})
	ctx := context.Background()
	hosts.set("qwen", ops.ServiceState{Service: "qwen", ActiveState: "inactive", SubState: "dead"})
	r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "ops", Text: "svc stop qwen", Confirmed: true})
	if r.Outcome != bot.Queued {
		t.Fatalf("svc stop: %s %s", r.Outcome, r.Text)
	}
	if j, err := app.Engine.Wait(ctx, r.JobID); err != nil || j.Status != "succeeded" {
		t.Fatalf("svc stop: %+v %v", j, err)
	}
	if rep, err := w.Pass(ctx, night); err != nil || len(rep.Opened) != 0 {
		t.Fatalf("pass after svc stop: %+v %v", rep, err)
	}
	r = app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "ops", Text: "svc start qwen"})
	if j, err := app.Engine.Wait(ctx, r.JobID); err != nil || j.Status != "succeeded" {
		t.Fatalf("svc start: %+v %v", j, err)
	}
	// The fake host stays inactive: now it is down against the bot's last word.
	if rep, err := w.Pass(ctx, night.Add(time.Minute)); err != nil || len(rep.Opened) != 1 {
		t.Fatalf("pass after svc start left it down: %+v %v", rep, err)
	}
	if len(alerts(chat)) != 1 {
		t.Fatal("no alert")
	}
}

// TestWatchdogRunOnLeaseHolder: two processes run their watchdogs; only the
// holder of the watchdog lease looks, one alert is posted; when the holder
// stops, the other takes over and closes the incident.
func TestWatchdogRunOnLeaseHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	hosts := newFakeHosts()
	cfg := "watchdog: {interval: 1s, to: \"console:oncall\"}\n"
	a1, c1 := apptest.Sched(t, path, hosts, cfg)
	a2, c2 := apptest.Sched(t, path, hosts, cfg)
	w1, _ := NewWatchdog(a1, WatchdogOptions{})
	w2, _ := NewWatchdog(a2, WatchdogOptions{})
	ctx := context.Background()
	ctx1, stop1 := context.WithCancel(ctx)
	ctx2, stop2 := context.WithCancel(ctx)
	done1, done2 := make(chan error, 1), make(chan error, 1)
	go func() { done1 <- w1.Run(ctx1) }()
	testkit.WaitFor(t, 10*time.Second, "w1 to hold the lease", func() bool { return apptest.LeaseHeld(ctx, a1, WatchdogLease) == nil })
	go func() { done2 <- w2.Run(ctx2) }()
	hosts.set("qwen", looping("qwen", 2))
	testkit.WaitFor(t, 10*time.Second, "an alert", func() bool { return len(alerts(c1))+len(alerts(c2)) >= 1 })
	if len(alerts(c2)) != 0 {
		t.Fatal("the process without the lease alerted")
	}
	stop1()
	<-done1
	testkit.WaitFor(t, 10*time.Second, "w2 to take the lease over", func() bool { return apptest.LeaseHeld(ctx, a2, WatchdogLease) == nil })
	hosts.set("qwen", healthy("qwen"))
	testkit.WaitFor(t, 10*time.Second, "the incident to close", func() bool {
		_, err := a2.Store.OpenIncidentOf(ctx, "qwen")
		return err != nil
	})
	if n := len(alerts(c1)) + len(alerts(c2)); n != 1 {
		t.Fatalf("%d alerts for one incident", n)
	}
	stop2()
	<-done2
}
