package bot

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/store"
)

// terminalChat is a Chat that, like a terminal, nobody reads once the
// process ends.
type terminalChat struct{ *chatrec.Recorder }

func (terminalChat) Transient() bool { return true }

// A schedule added in a terminal without --to would report to the terminal,
// which nobody reads when `opsbot serve` runs it: with no report rooms in the
// config it is refused and nothing is stored; with them it reports there and
// says so; --to is taken as given. A chat that is read keeps reporting where
// it was added.
func TestScheduleAddedInATerminalReportsWhereSomeoneReads(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(fmt.Sprintf(schedConfig, filepath.Join(t.TempDir(), "opsbot.db"), "")), t.TempDir(),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	app, err := NewApp(context.Background(), cfg, AppOptions{Backend: jobtest.OK(),
		Chats: map[string]Chat{"console": terminalChat{chatrec.New()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	ctx := context.Background()
	add := func(text string) Reply {
		return app.Dispatcher.Handle(ctx, Request{Platform: "console", User: "alice", Room: "terminal", Text: text})
	}
	count := func() int {
		list, err := app.Store.Schedules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	for _, text := range []string{`schedule add "0 3 * * *" bench`, `schedule add --dry-run @daily bench`} {
		r := add(text)
		if r.Outcome != Invalid || count() != 0 {
			t.Fatalf("%s with no report rooms: %s %q, %d schedules; want refused, none stored", text, r.Outcome, r.Text, count())
		}
		for _, want := range []string{"nobody reads this terminal when `opsbot serve` runs it", "schedule add --to slack:CHANNEL "} {
			if !strings.Contains(r.Text, want) {
				t.Errorf("%s: the refusal lacks %q:\n%s", text, want, r.Text)
			}
		}
	}
	if r := add(`schedule add "0 3 * * *" bench`); !strings.Contains(r.Text, `schedule add --to slack:CHANNEL "0 3 * * *" bench`) {
		t.Errorf("the refusal does not show the command to type:\n%s", r.Text)
	}
	// One that needs confirmation is refused before it is asked.
	if r := add(`schedule add @daily gpu recover qwen`); r.Outcome != Invalid || !strings.Contains(r.Text, "schedule add --to slack:CHANNEL @daily gpu recover qwen") {
		t.Fatalf("schedule add of gpu recover: %s %q, want refused before asking", r.Outcome, r.Text)
	}

	if r := add(`schedule add --to console:terminal @daily bench`); r.Outcome != Answered {
		t.Fatalf("an explicit --to: %s %q", r.Outcome, r.Text)
	}

	app.Dispatcher.SetReportRooms([]Target{{Platform: "slack", Room: "C0OPS"}, {Platform: "matrix", Room: "!ops:example.org"}})
	r := add(`schedule add @hourly bench`)
	if r.Outcome != Answered || !strings.Contains(r.Text, "reporting to slack:C0OPS,matrix:!ops:example.org (the config's report rooms") {
		t.Fatalf("with report rooms: %s %q", r.Outcome, r.Text)
	}
	list, err := app.Store.Schedules(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("schedules %+v %v", list, err)
	}
	if list[0].Targets != "console:terminal" || list[1].Targets != "slack:C0OPS,matrix:!ops:example.org" {
		t.Errorf("targets %q and %q, want console:terminal (as given) and the report rooms", list[0].Targets, list[1].Targets)
	}

	// A chat that is read (not Transient) reports where it was added.
	h := newHarness(t, jobtest.OK(), roles)
	if r := h.handle("alice", `schedule add @daily bench qwen`); r.Outcome != Answered || !strings.Contains(r.Text, "reporting here") {
		t.Fatalf("schedule add in a chat: %s %q", r.Outcome, r.Text)
	}
}

// The config's report rooms are its Slack channel and first Matrix room, of
// the platforms it enables.
func TestReportRooms(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{Slack: &config.Slack{Enabled: true, Channel: "C0OPS"},
		Matrix: &config.Matrix{Enabled: true, Rooms: []string{"!a:hs", "!b:hs"}}}
	if got := fmt.Sprint(ReportRooms(cfg)); got != "[{slack C0OPS} {matrix !a:hs}]" {
		t.Errorf("report rooms %s", got)
	}
	cfg.Slack.Enabled = false
	cfg.Matrix = nil
	if got := ReportRooms(cfg); len(got) != 0 {
		t.Errorf("report rooms of a config without chats: %v", got)
	}
}

// An answer about a job carries it as data (for the terminal's --json):
// `job N` that job with its command, times, steps and result; `jobs all`
// the newest JobsListed and how many older ones it left out.
func TestJobAnswersCarryTheirJobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	r := h.handle("olga", "svc restart qwen")
	if r.Outcome != Queued {
		t.Fatalf("svc restart: %s %q", r.Outcome, r.Text)
	}
	h.wait(r.JobID)
	a := h.handle("vic", fmt.Sprintf("job %d", r.JobID))
	j := a.Job
	if a.Outcome != Answered || j == nil {
		t.Fatalf("job %d: %s %q, job %+v", r.JobID, a.Outcome, a.Text, j)
	}
	if j.ID != r.JobID || j.Status != store.Succeeded || j.Command != "svc restart qwen" || j.Created.IsZero() || j.Started.IsZero() ||
		j.Ended.IsZero() || j.Result == nil || j.Result.Summary != "all good" || len(j.Events) != 2 {
		t.Errorf("job %d as data: %+v", r.JobID, j)
	}
	if l := h.handle("vic", "jobs all"); len(l.Jobs) != 1 || l.Omitted != 0 || l.Jobs[0].ID != r.JobID {
		t.Errorf("jobs all of one job: %+v omitted %d", l.Jobs, l.Omitted)
	}
	if l := h.handle("vic", "jobs"); l.Jobs == nil || len(l.Jobs) != 0 {
		t.Errorf("jobs with none running: %#v, want an empty list", l.Jobs)
	}

	for i := 0; i < JobsListed+2; i++ {
		if _, err := h.store.CreateJob(ctx, store.Job{Command: "gpu status", Platform: "test", User: "olga", Room: "ops", Status: store.Succeeded}); err != nil {
			t.Fatal(err)
		}
	}
	l := h.handle("vic", "jobs all")
	if len(l.Jobs) != JobsListed || l.Omitted != 3 || l.Jobs[0].ID <= l.Jobs[1].ID {
		t.Fatalf("jobs all of %d jobs: %d listed, %d omitted; want the newest %d first and 3 omitted", JobsListed+3, len(l.Jobs), l.Omitted, JobsListed)
	}
	if !strings.Contains(l.Text, "… and 3 older not listed") {
		t.Errorf("the list does not say what it left out:\n%s", l.Text)
	}
}
