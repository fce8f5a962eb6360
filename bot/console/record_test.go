package console

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/testkit"
)

// refusedBot is a Bot whose one job, #1, ended on its host (failed) while
// its store refused the record: AwaitRecord blocks until record says how
// it ends (nil: the store took it) or its context ends. (A stand-in: the
// console's wait is what is tested here; the runtime's side runs on real
// stores in jobs and cmd/opsbot.)
type refusedBot struct {
	record chan error
	mu     sync.Mutex
	stored bool
}

func (b *refusedBot) Handle(context.Context, bot.Request) bot.Reply {
	return bot.Reply{Outcome: bot.Queued, JobID: 1}
}
func (b *refusedBot) Act(context.Context, bot.ActionRequest) bot.Reply { return bot.Reply{} }
func (b *refusedBot) Previewed(context.Context, string, string) error  { return nil }
func (b *refusedBot) Check(string) error                               { return nil }
func (b *refusedBot) Active() []int64                                  { return nil }
func (b *refusedBot) Wait(context.Context, int64) (bot.JobOutcome, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := bot.JobOutcome{ID: 1, Command: "mtp steps 8 qwen", Status: "failed", Error: "benchmark skipped: opsbot's store refuses writes",
		Ended: time.Date(2026, 12, 5, 3, 4, 5, 0, time.UTC)}
	if !b.stored {
		o.Unrecorded = errors.New("database is full")
	}
	return o, nil
}
func (b *refusedBot) AwaitRecord(ctx context.Context, _ int64) error {
	select {
	case err := <-b.record:
		b.mu.Lock()
		b.stored = err == nil
		b.mu.Unlock()
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runRefused runs `mtp steps 8` on a refusedBot with RecordTick tick and
// RecordWait wait; record, when set, is called once the run says it still
// waits twice, and says how the record ends.
func runRefused(t *testing.T, json bool, wait time.Duration, record func() error) (code int, out, errs string) {
	t.Helper()
	b := &refusedBot{record: make(chan error, 1)}
	var o, e testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Run(context.Background(), RunOptions{Bot: b, OSUser: "op", JSON: json, Out: &o, Err: &e,
			RecordWait: wait, RecordTick: 20 * time.Millisecond}, []string{"mtp steps 8"})
	}()
	if record != nil {
		testkit.WaitFor(t, 10*time.Second, "two reminders that the run still waits", func() bool {
			return strings.Count(e.String(), "still waiting for opsbot's store to take job #1's record") >= 2
		})
		b.record <- record()
	}
	select {
	case code = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("Run did not return; stderr:\n%s", e.String())
	}
	return code, o.String(), e.String()
}

// A job whose record the store refuses: Run says at once that it waits
// (and for how long, and that Ctrl-C gives up), then again every
// RecordTick; once the store takes the record it exits with the job's own
// code.
func TestRunWaitsForTheRecordAndSaysSo(t *testing.T) {
	t.Parallel()
	code, _, errs := runRefused(t, false, time.Minute, func() error { return nil })
	for _, want := range []string{
		"opsbot: job #1 failed on its host, but opsbot's store refuses its record (database is full): waiting up to 1m0s for the store to take it (Ctrl-C gives up)\n",
		"opsbot: still waiting for opsbot's store to take job #1's record (",
		"opsbot: the store took job #1's record\n",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if code != ExitFail {
		t.Errorf("exit %d, want %d (the job failed, and is recorded)", code, ExitFail)
	}
}

// The store never takes the record within RecordWait, or opsbot stops
// first (Ctrl-C): Run prints the job's outcome all the same, says it is
// not recorded and why, and exits ExitUnrecorded; with JSON, the job's
// line carries the outcome and "unrecorded".
func TestRunGivesUpTheRecord(t *testing.T) {
	t.Parallel()
	code, _, errs := runRefused(t, false, 100*time.Millisecond, nil)
	if code != ExitUnrecorded || !strings.Contains(errs, "opsbot: job #1 `mtp steps 8 qwen` failed on its host at 03:04:05 UTC: benchmark skipped") ||
		!strings.Contains(errs, "It is not recorded: opsbot's store refused it for 100ms (database is full).") {
		t.Errorf("the wait ran out: exit %d (want %d); stderr:\n%s", code, ExitUnrecorded, errs)
	}
	code, out, errs := runRefused(t, true, time.Minute, func() error { return errors.New("opsbot stopped before its store took the job's record") })
	var line JSONLine
	if err := json.Unmarshal([]byte(out), &line); err != nil {
		t.Fatalf("not one JSON line: %v\n%s", err, out)
	}
	if code != ExitUnrecorded || line.Job == nil || line.Job.Status != "failed" || line.Unrecorded != "opsbot stopped before its store took the job's record" {
		t.Errorf("opsbot stopped first: exit %d (want %d), line %+v; stderr:\n%s", code, ExitUnrecorded, line, errs)
	}
}
