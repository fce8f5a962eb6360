package schedule

import (
	"bytes"
	"context"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
)

// TestScheduledSweepOnLabFiresOnce: a nightly `sweep` schedule on the lab,
// with an injected clock: ticking before its time runs nothing; at its time
// it runs once, posting one status thread to its room whose final result
// holds the sweep's table; ticking the same night again runs nothing more.
func TestScheduledSweepOnLabFiresOnce(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t, lab.Options{TimeScale: 50, LoadTime: 5 * time.Second})
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.WaitReady(wctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	app, chat := apptest.Lab(t, l, `schedules:
  - {cron: "0 3 * * *", command: "sweep qwen steps 2,3", as: "console:root", to: "console:oncall"}
`)
	ctx := context.Background()
	clock := testkit.NewClock(night)
	s, err := NewScheduler(ctx, app, SchedulerOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tick(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	if n := len(countJobs(t, app.Store)); n != 0 {
		t.Fatalf("%d jobs before 03:00", n)
	}
	clock.Set(night.Add(time.Hour))
	for range 3 {
		if err := s.Tick(ctx, clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	jobs := countJobs(t, app.Store)
	if len(jobs) != 1 {
		t.Fatalf("%d jobs for one firing", len(jobs))
	}
	jctx, jcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer jcancel()
	j, err := app.Engine.Wait(jctx, jobs[0].ID)
	if err != nil || j.Status != "succeeded" {
		t.Fatalf("sweep: %+v %v", j, err)
	}
	roots := chat.Posts()
	if len(roots) != 1 {
		t.Fatalf("%d root messages, want the sweep's one status thread: %+v", len(roots), roots)
	}
	edits, replies := chat.Thread("1")
	if len(edits) == 0 || !edits[len(edits)-1].Final {
		t.Fatalf("status never finalised: %+v", edits)
	}
	var result string
	var chart *bot.Image
	for _, r := range replies {
		if r.Kind == bot.KindResult {
			result = r.Text
		}
		if r.Image != nil {
			chart = r.Image
		}
	}
	if !strings.Contains(result, "steps") {
		t.Fatalf("no sweep report in the thread: %q", result)
	}
	// The report's chart: a PNG that decodes, of a readable size.
	if chart == nil {
		t.Fatalf("the sweep report posted no chart")
	}
	img, err := png.Decode(bytes.NewReader(chart.PNG))
	if err != nil {
		t.Fatalf("chart %s is not a PNG: %v", chart.Name, err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 300 {
		t.Errorf("chart %s is %dx%d, too small to read", chart.Name, b.Dx(), b.Dy())
	}
	sc, _ := app.Store.Schedules(ctx)
	if len(sc) != 1 || sc[0].LastJobID != j.ID || !sc[0].NextRunAt.Equal(night.Add(25*time.Hour)) {
		t.Fatalf("schedule after the run: %+v", sc)
	}
}
