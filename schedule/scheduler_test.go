package schedule

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

func countJobs(t *testing.T, st *store.Store) []store.Job {
	t.Helper()
	jobs, err := st.ListJobs(context.Background(), store.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Job
	for _, j := range jobs {
		if j.ScheduleID != 0 {
			out = append(out, j)
		}
	}
	return out
}

func notices(c *chatrec.Recorder) []string {
	var out []string
	for _, m := range c.Posts() {
		if m.Kind == bot.KindNotice {
			out = append(out, m.Text)
		}
	}
	return out
}

var night = time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC) // an hour before the nightly run

// TestScheduleNightlyFiresOnceAcrossTwoApps: two Apps on one store, both
// ticking at the firing time (as two `opsbot serve` would after a lease
// handover race): the nightly schedule runs exactly once, posts its thread
// to the room it was added in, and records its last and next run.
func TestScheduleNightlyFiresOnceAcrossTwoApps(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	var runs atomic.Int64
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		runs.Add(1)
		return &ops.Result{Summary: "swept"}, nil
	})
	a1, chat1 := apptest.Sched(t, path, backend, "")
	a2, _ := apptest.Sched(t, path, backend, "")
	clock := testkit.NewClock(night)
	ctx := context.Background()
	r := a1.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "alice", Room: "ops", Text: `schedule add "0 3 * * *" sweep steps 1..3`})
	if r.Outcome != bot.Answered {
		t.Fatalf("schedule add: %s %s", r.Outcome, r.Text)
	}
	list, _ := a1.Store.Schedules(ctx)
	if len(list) != 1 {
		t.Fatalf("schedules: %+v", list)
	}
	s1, err := NewScheduler(ctx, a1, SchedulerOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewScheduler(ctx, a2, SchedulerOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	// The schedule was created "now" by the real clock; fire relative to it.
	created := list[0].CreatedAt
	clock.Set(created)
	for _, s := range []*Scheduler{s1, s2} {
		if err := s.Tick(ctx, clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(countJobs(t, a1.Store)); n != 0 {
		t.Fatalf("%d scheduled jobs before the firing", n)
	}
	sc, _ := a1.Store.Schedule(ctx, list[0].ID)
	want := nextAt(created, 3)
	if !sc.NextRunAt.Equal(want) {
		t.Fatalf("next run %s, want %s", sc.NextRunAt, want)
	}
	clock.Set(want.Add(time.Second))
	done := make(chan error, 2)
	for _, s := range []*Scheduler{s1, s2} {
		go func() { done <- s.Tick(ctx, clock.Now()) }()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	jobs := countJobs(t, a1.Store)
	if len(jobs) != 1 {
		t.Fatalf("%d jobs for one firing, want 1: %+v", len(jobs), jobs)
	}
	j := jobs[0]
	if j.Command != "sweep qwen steps 1..3" || j.User != "console:alice" || j.Platform != "console" || j.Room != "ops" {
		t.Fatalf("job %+v", j)
	}
	testkit.WaitFor(t, 10*time.Second, "the scheduled job to finish", func() bool {
		jj, _ := a1.Store.Job(ctx, j.ID)
		jj2, _ := a2.Store.Job(ctx, j.ID)
		return jj.Status.Final() || jj2.Status.Final()
	})
	if runs.Load() != 1 {
		t.Fatalf("pipeline ran %d times", runs.Load())
	}
	sc, _ = a1.Store.Schedule(ctx, list[0].ID)
	if sc.LastJobID != j.ID || sc.LastRunAt.IsZero() || !sc.NextRunAt.Equal(want.Add(24*time.Hour)) {
		t.Fatalf("after the run: %+v", sc)
	}
	// The same firing ticked again (a late tick, or the other process) runs nothing.
	for _, s := range []*Scheduler{s1, s2} {
		if err := s.Tick(ctx, clock.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(countJobs(t, a1.Store)); n != 1 {
		t.Fatalf("%d jobs after re-ticking the same firing", n)
	}
	_ = chat1
}

// nextAt is the first hour:00 UTC after t.
func nextAt(t time.Time, hour int) time.Time {
	n := time.Date(t.Year(), t.Month(), t.Day(), hour, 0, 0, 0, time.UTC)
	if !n.After(t) {
		n = n.Add(24 * time.Hour)
	}
	return n
}

// TestScheduleSkipsWhileRunning: the previous run is still going at the next
// firing, so that firing is skipped and the room is told why.
func TestScheduleSkipsWhileRunning(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var runs atomic.Int64
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &ops.Result{Summary: "done"}, nil
	})
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), backend, "")
	ctx := context.Background()
	sc, err := app.Store.AddSchedule(ctx, store.Schedule{Spec: "@every 1h", Command: "bench qwen", Platform: "console", Room: "ops",
		CreatedBy: "olga", CreatedAt: night})
	if err != nil {
		t.Fatal(err)
	}
	clock := testkit.NewClock(night)
	s, err := NewScheduler(ctx, app, SchedulerOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Hour)
	if err := s.Tick(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the first run to start", func() bool { return runs.Load() == 1 })
	clock.Add(time.Hour)
	if err := s.Tick(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if n := len(countJobs(t, app.Store)); n != 1 {
		t.Fatalf("%d jobs, want 1 (the second firing skipped)", n)
	}
	ns := notices(chat)
	if len(ns) != 1 || !strings.Contains(ns[0], fmt.Sprintf("schedule #%d skipped its run of 2026-12-03 04:00 UTC", sc.ID)) ||
		!strings.Contains(ns[0], "is still running") {
		t.Fatalf("notices: %q", ns)
	}
	close(release)
	first := countJobs(t, app.Store)[0]
	testkit.WaitFor(t, 10*time.Second, "the first run to end", func() bool { j, _ := app.Store.Job(ctx, first.ID); return j.Status.Final() })
	clock.Add(time.Hour)
	if err := s.Tick(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if n := len(countJobs(t, app.Store)); n != 2 {
		t.Fatalf("%d jobs after the previous run ended, want 2", n)
	}
}

// TestScheduleMissedPolicy: firings that fell while no opsbot ran are run
// once at start (missed: run) or skipped with a notice (missed: skip, the
// default), config schedules with `as` and `to`.
func TestScheduleMissedPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		missed   string
		wantJobs int
	}{{"run", 1}, {"skip", 0}, {"", 0}} {
		t.Run("missed="+tc.missed, func(t *testing.T) {
			extra := `schedules:
  - {cron: "0 3 * * *", command: "bench qwen", as: "console:olga", to: "console:oncall"`
			if tc.missed != "" {
				extra += `, missed: ` + tc.missed
			}
			extra += "}"
			path := filepath.Join(t.TempDir(), "opsbot.db")
			var runs atomic.Int64
			backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
				runs.Add(1)
				return &ops.Result{Summary: "ok"}, nil
			})
			app, chat := apptest.Sched(t, path, backend, extra)
			ctx := context.Background()
			clock := testkit.NewClock(night)
			s, err := NewScheduler(ctx, app, SchedulerOptions{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			// Down for three nights: three firings missed; at most one runs.
			clock.Add(3*24*time.Hour + 2*time.Hour)
			if err := s.CatchUp(ctx, clock.Now()); err != nil {
				t.Fatal(err)
			}
			jobs := countJobs(t, app.Store)
			if len(jobs) != tc.wantJobs {
				t.Fatalf("%d jobs, want %d", len(jobs), tc.wantJobs)
			}
			if tc.wantJobs == 1 && (jobs[0].User != "console:olga" || jobs[0].Room != "oncall") {
				t.Fatalf("job %+v: want it as console:olga in console:oncall", jobs[0])
			}
			ns := notices(chat)
			if tc.wantJobs == 0 && (len(ns) != 1 || !strings.Contains(ns[0], "missed its run of 2026-12-06 03:00 UTC") || !strings.Contains(ns[0], "skipped")) {
				t.Fatalf("notices: %q", ns)
			}
			// A second start (or the other process) decides nothing again.
			s2, err := NewScheduler(ctx, app, SchedulerOptions{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			if err := s2.CatchUp(ctx, clock.Now()); err != nil {
				t.Fatal(err)
			}
			if n := len(countJobs(t, app.Store)); n != tc.wantJobs {
				t.Fatalf("%d jobs after a second catch-up", n)
			}
		})
	}
}

// TestScheduleRefusedWhenCreatorLostRole: the run is authorised as its
// creator at run time; a creator who is now a viewer gets a refusal in the
// room, and nothing runs.
func TestScheduleRefusedWhenCreatorLostRole(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		runs.Add(1)
		return &ops.Result{}, nil
	})
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), backend, "")
	ctx := context.Background()
	if _, err := app.Store.AddSchedule(ctx, store.Schedule{Spec: "0 3 * * *", Command: "bench qwen", Platform: "console", Room: "ops",
		CreatedBy: "vic", CreatedAt: night}); err != nil {
		t.Fatal(err)
	}
	s, err := NewScheduler(ctx, app, SchedulerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tick(ctx, night.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	jobs := countJobs(t, app.Store)
	if len(jobs) != 1 || jobs[0].Status != store.Refused {
		t.Fatalf("jobs %+v, want one refused", jobs)
	}
	ns := notices(chat)
	if len(ns) != 1 || !strings.Contains(ns[0], "its creator console:vic has the viewer role now") {
		t.Fatalf("notices %q", ns)
	}
	if runs.Load() != 0 {
		t.Fatal("the pipeline ran")
	}
}

// TestSchedulerLeaseOneHolder: two Apps run their schedulers; only the
// lease holder fires. When the holder stops (its process ends), the other
// takes the lease over and fires the next firing once.
func TestSchedulerLeaseOneHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	var runs atomic.Int64
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		runs.Add(1)
		return &ops.Result{}, nil
	})
	a1, _ := apptest.Sched(t, path, backend, "")
	a2, _ := apptest.Sched(t, path, backend, "")
	ctx := context.Background()
	if _, err := a1.Store.AddSchedule(ctx, store.Schedule{Spec: "@every 1h", Command: "bench qwen", Platform: "console", Room: "ops",
		CreatedBy: "olga", CreatedAt: night}); err != nil {
		t.Fatal(err)
	}
	clock := testkit.NewClock(night)
	ctx1, stop1 := context.WithCancel(ctx)
	ctx2, stop2 := context.WithCancel(ctx)
	defer stop2()
	s1, _ := NewScheduler(ctx, a1, SchedulerOptions{Now: clock.Now, Poll: 5 * time.Millisecond})
	s2, _ := NewScheduler(ctx, a2, SchedulerOptions{Now: clock.Now, Poll: 5 * time.Millisecond})
	done1 := make(chan error, 1)
	go func() { done1 <- s1.Run(ctx1) }()
	testkit.WaitFor(t, 10*time.Second, "a1 to hold the lease", func() bool { return apptest.LeaseHeld(ctx, a1, SchedulerLease) == nil })
	done2 := make(chan error, 1)
	go func() { done2 <- s2.Run(ctx2) }()
	for i := 1; i <= 3; i++ {
		clock.Add(time.Hour)
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("firing %d and its job", i), func() bool { return ranAll(t, a1.Store, i) })
	}
	if apptest.LeaseHeld(ctx, a2, SchedulerLease) == nil {
		t.Fatal("both hold the scheduler lease")
	}
	stop1()
	<-done1
	testkit.WaitFor(t, 10*time.Second, "a2 to take the lease over", func() bool { return apptest.LeaseHeld(ctx, a2, SchedulerLease) == nil })
	clock.Add(time.Hour)
	testkit.WaitFor(t, 10*time.Second, "firing 4 on a2", func() bool { return ranAll(t, a1.Store, 4) })
	if n := len(countJobs(t, a1.Store)); n != 4 {
		t.Fatalf("%d jobs for 4 firings", n)
	}
	stop2()
	<-done2
}

// ranAll reports whether n scheduled jobs exist and all have finished.
func ranAll(t *testing.T, st *store.Store, n int) bool {
	jobs := countJobs(t, st)
	if len(jobs) != n {
		return false
	}
	for _, j := range jobs {
		if !j.Status.Final() {
			return false
		}
	}
	return true
}

// TestScheduleAfterRunHook: AfterRun gets each scheduled job's final row
// (regression checks hook in here).
func TestScheduleAfterRunHook(t *testing.T) {
	t.Parallel()
	app, _ := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), jobtest.OK(), "")
	ctx := context.Background()
	if _, err := app.Store.AddSchedule(ctx, store.Schedule{Spec: "@hourly", Command: "bench qwen", Platform: "console", Room: "ops",
		CreatedBy: "olga", CreatedAt: night}); err != nil {
		t.Fatal(err)
	}
	got := make(chan store.Job, 1)
	s, err := NewScheduler(ctx, app, SchedulerOptions{AfterRun: func(_ context.Context, j store.Job) { got <- j }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tick(ctx, night.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-got:
		if j.Status != store.Succeeded || j.ScheduleID == 0 {
			t.Fatalf("AfterRun got %+v", j)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AfterRun was not called")
	}
}

// A scheduled benchmark more than alerts.regression_pct below the median of
// its comparable runs posts one alert, with both figures, to the schedule's
// room; runs within the threshold post none.
func TestScheduledRunRegressionAlert(t *testing.T) {
	t.Parallel()
	var tokS atomic.Int64
	tokS.Store(300)
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		return &ops.Result{Summary: "benchmarked", Spec: &ops.Spec{Engine: "sglang", Steps: 3, TopK: 1, DraftTokens: 4},
			Bench: &ops.BenchResult{OutputTokS: float64(tokS.Load()), RequestsOK: 16, Concurrency: 4,
				Settings: bench.Settings{Prompts: 16, Concurrency: 4, InputLen: 256, OutputLen: 128}}}, nil
	})
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), backend, "")
	ctx := context.Background()
	if _, err := app.Store.AddSchedule(ctx, store.Schedule{Spec: "@hourly", Command: "bench qwen", Platform: "console", Room: "ops",
		CreatedBy: "olga", CreatedAt: night}); err != nil {
		t.Fatal(err)
	}
	done := make(chan int64, 1)
	s, err := NewScheduler(ctx, app, SchedulerOptions{Regressions: &report.RegressionPolicy{Pct: 10, Runs: 7},
		AfterRun: func(_ context.Context, j store.Job) { done <- j.ID }})
	if err != nil {
		t.Fatal(err)
	}
	alerts := func() []string {
		var out []string
		for _, m := range chat.Posts() {
			if strings.Contains(m.Text, "regress") {
				out = append(out, m.Text)
			}
		}
		return out
	}
	// fire runs the schedule's next firing and returns once its job ended
	// and its regression check posted what it found (AfterRun comes after).
	fire := func(hour int) {
		t.Helper()
		if err := s.Tick(ctx, night.Add(time.Duration(hour)*time.Hour)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the scheduled job did not finish")
		}
	}
	for h, v := range []int64{300, 310, 290, 295} { // a baseline, within noise
		tokS.Store(v)
		fire(h + 1)
	}
	if a := alerts(); len(a) != 0 {
		t.Fatalf("alerts for runs within the threshold: %q", a)
	}
	tokS.Store(200) // a third slower than the median of 297.5
	fire(5)
	a := alerts()
	if len(a) != 1 || !strings.Contains(a[0], "200") || !strings.Contains(a[0], "297.5") {
		t.Fatalf("alerts %q: want one naming 200 tok/s against the median 297.5", a)
	}
}

// A scheduled sweep is judged per concurrency bucket: each setting at each
// concurrency against its own history. A night on which concurrency 32 got
// slower and the accept length at concurrency 1 fell posts one alert naming
// both buckets, their setting and figure; the buckets that held are not
// named.
func TestScheduledSweepRegressionPerBucket(t *testing.T) {
	t.Parallel()
	var night5 atomic.Bool
	spec := &ops.Spec{Engine: "sglang", Steps: 4, TopK: 1, DraftTokens: 5}
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		res := &ops.Result{Summary: "swept", Spec: spec, Metric: ops.MetricOutputTokS}
		for _, c := range []int{1, 32} {
			tok, acc := 250.0, 3.2
			if c == 32 {
				tok, acc = 2400, 3.1
			}
			if night5.Load() {
				if c == 32 {
					tok = 1700 // 29% slower
				} else {
					acc = 2.5 // 22% shorter
				}
			}
			res.Points = append(res.Points, ops.SweepPoint{Steps: 4, TopK: 1, DraftTokens: 5, Concurrency: c, OK: true, Spec: spec,
				OutputTokS: tok, AcceptLen: acc, Bench: &ops.BenchResult{OutputTokS: tok, AcceptLen: acc, RequestsOK: 16, Concurrency: c,
					Settings: bench.Settings{Prompts: 64, Concurrency: c, InputLen: 256, OutputLen: 128}}})
		}
		return res, nil
	})
	app, chat := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), backend, "")
	ctx := context.Background()
	if _, err := app.Store.AddSchedule(ctx, store.Schedule{Spec: "@daily", Command: "sweep qwen steps 4 at 1,32", Platform: "console",
		Room: "ops", CreatedBy: "olga", CreatedAt: night}); err != nil {
		t.Fatal(err)
	}
	done := make(chan int64, 1)
	s, err := NewScheduler(ctx, app, SchedulerOptions{Regressions: &report.RegressionPolicy{Pct: 10, Runs: 7},
		AfterRun: func(_ context.Context, j store.Job) { done <- j.ID }})
	if err != nil {
		t.Fatal(err)
	}
	alerts := func() []string {
		var out []string
		for _, m := range chat.Posts() {
			if strings.HasPrefix(m.Text, "regression") {
				out = append(out, m.Text)
			}
		}
		return out
	}
	var last int64
	for d := 1; d <= 5; d++ {
		night5.Store(d == 5)
		if err := s.Tick(ctx, night.Add(time.Duration(d)*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		select {
		case last = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("night %d: the scheduled sweep did not finish", d)
		}
		if a := alerts(); d < 5 && len(a) != 0 {
			t.Fatalf("night %d: alerts for unchanged figures: %q", d, a)
		}
	}
	a := alerts()
	if len(a) != 1 {
		t.Fatalf("alerts %q: want one", a)
	}
	lines := strings.Split(a[0], "\n")
	want := []string{
		fmt.Sprintf("regression: qwen measured more than 10%% below the median of its last comparable runs in job #%d", last),
		"• concurrency 1, steps=4,topk=1,draft=5: accept length 2.50, 21.9% below the median 3.20 of the last 4 runs (prompts=64 in=256 out=128)",
		"• concurrency 32, steps=4,topk=1,draft=5: output 1700.0 tok/s, 29.2% below the median 2400.0 tok/s of the last 4 runs (prompts=64 in=256 out=128)",
	}
	if len(lines) != 5 || !slices.Equal(lines[:3], want) || !strings.HasPrefix(lines[4], fmt.Sprintf("next: `job %d`", last)) ||
		!strings.Contains(lines[4], "`mtp show qwen`") {
		t.Fatalf("alert:\n%s\nwant it to begin:\n%s", a[0], strings.Join(want, "\n"))
	}
}

// TestTimeScale: the scaled clock reads Epoch + (t - Epoch) * Factor, and
// two readers with the same scale agree; bad values are refused with what
// to write.
func TestTimeScale(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	ts, err := ParseTimeScale("12@2026-12-04T18:00:00Z", epoch.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	base := testkit.NewClock(epoch.Add(5 * time.Second))
	if got, want := ts.Clock(base.Now)(), epoch.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("5 s after the epoch at 12x reads %s, want %s", got, want)
	}
	base.Add(10 * time.Second)
	if got, want := ts.Clock(base.Now)(), epoch.Add(3*time.Minute); !got.Equal(want) {
		t.Fatalf("15 s after the epoch at 12x reads %s, want %s", got, want)
	}
	for _, bad := range []string{"12", "1@2026-12-04T18:00:00Z", "0.5@2026-12-04T18:00:00Z", "x@2026-12-04T18:00:00Z",
		"20000@2026-12-04T18:00:00Z", "12@yesterday", "12@2026-12-01T18:00:00Z"} {
		if _, err := ParseTimeScale(bad, epoch); err == nil {
			t.Errorf("ParseTimeScale(%q) accepted", bad)
		}
	}
}

// TestScheduleEveryMinuteOnAScaledClock: a `* * * * *` schedule with the
// scheduler's clock at 60x (Scale) fires about once a second through Run,
// each firing once, with no injected Now: what `opsbot serve` does under
// OPSBOT_SCHEDULER_TIME_SCALE.
func TestScheduleEveryMinuteOnAScaledClock(t *testing.T) {
	t.Parallel()
	app, _ := apptest.Sched(t, filepath.Join(t.TempDir(), "opsbot.db"), jobtest.OK(), "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scale := &TimeScale{Factor: 60, Epoch: time.Now()}
	if _, err := app.Store.AddSchedule(ctx, store.Schedule{Spec: "* * * * *", Command: "bench qwen", Platform: "console", Room: "ops",
		CreatedBy: "olga", CreatedAt: scale.Clock(app.Store.Clock())()}); err != nil {
		t.Fatal(err)
	}
	s, err := NewScheduler(ctx, app, SchedulerOptions{Scale: scale})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	start := time.Now()
	testkit.WaitFor(t, 10*time.Second, "three firings", func() bool { return ranAll(t, app.Store, 3) })
	took := time.Since(start)
	cancel()
	<-done
	list, _ := app.Store.Schedules(context.Background())
	fs, err := app.Store.Firings(context.Background(), list[0].ID)
	if err != nil || len(fs) < 3 {
		t.Fatalf("firings %+v, %v", fs, err)
	}
	for i := 1; i < len(fs); i++ {
		if d := fs[i].At.Sub(fs[i-1].At).Abs(); d != time.Minute {
			t.Fatalf("firings %s and %s are %s apart, want a minute each", fs[i-1].At, fs[i].At, d)
		}
	}
	if n := len(countJobs(t, app.Store)); n != len(fs) {
		t.Fatalf("%d jobs for %d firings", n, len(fs))
	}
	t.Logf("3 firings of a minute schedule at 60x in %s", took.Round(time.Millisecond))
}
