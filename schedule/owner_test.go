package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
)

// TestJobLogNamesTheUserOnce: the job log lines name who started a job by
// its auth key, once: `console:olga` for a command typed in a terminal, and
// the schedule's creator `console:alice` for a scheduled run (whose job row
// records the creator's key), never `console:console:alice`.
func TestJobLogNamesTheUserOnce(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(fmt.Sprintf(jobtest.Config, filepath.Join(t.TempDir(), "opsbot.db"), "")), t.TempDir(),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		return &ops.Result{Summary: "done"}, nil
	})
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{Backend: backend, Chats: map[string]bot.Chat{"console": chatrec.New()},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	ctx := context.Background()

	r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "olga", Room: "ops", Text: "bench"})
	if r.Outcome != bot.Queued {
		t.Fatalf("bench: %s %s", r.Outcome, r.Text)
	}
	if r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "alice", Room: "ops", Text: `schedule add "0 3 * * *" bench`}); r.Outcome != bot.Answered {
		t.Fatalf("schedule add: %s %s", r.Outcome, r.Text)
	}
	list, err := app.Store.Schedules(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("schedules %+v %v", list, err)
	}
	clock := testkit.NewClock(list[0].CreatedAt)
	s, err := NewScheduler(ctx, app, SchedulerOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(nextAt(list[0].CreatedAt, 3).Add(time.Second))
	if err := s.Tick(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	jobs := countJobs(t, app.Store)
	if len(jobs) != 1 {
		t.Fatalf("%d scheduled jobs, want 1", len(jobs))
	}
	for _, id := range []int64{r.JobID, jobs[0].ID} {
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("job #%d logged finished", id), func() bool {
			return regexp.MustCompile(fmt.Sprintf(`msg="job finished" job=%d `, id)).MatchString(logs.String())
		})
	}
	out := logs.String()
	for id, want := range map[int64]string{r.JobID: "console:olga", jobs[0].ID: "console:alice"} {
		for _, msg := range []string{"job queued", "job started", "job finished"} {
			line := regexp.MustCompile(fmt.Sprintf(`(?m)^.*msg="%s" job=%d .*$`, msg, id)).FindString(out)
			if !strings.Contains(line, " user="+want+" ") {
				t.Errorf("%s of #%d does not name user=%s:\n%s", msg, id, want, line)
			}
		}
	}
	if strings.Contains(out, "console:console:") {
		t.Errorf("a user printed with a doubled prefix:\n%s", out)
	}
	// The job view says the same.
	if r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "alice", Room: "ops", Text: fmt.Sprintf("job %d", jobs[0].ID)}); !strings.Contains(r.Text, "asked by console:alice ") {
		t.Errorf("job view: %s", r.Text)
	}
}
