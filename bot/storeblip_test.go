package bot_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// The step boundaries of `mtp steps N` at which the store is taken away:
// right as the step named ends (its "done" event is the first write the
// store refuses), or, for "final", once the pipeline returned with every
// event stored (the job's benchmark row and final state are the first
// writes refused). A job whose steps all completed succeeds with its
// benchmark row; one that stops earlier winds down at its next safe point
// and fails, naming the store.
var blipBoundaries = []struct {
	name, step string
	succeeds   bool
}{
	{"read", "read unit", false},
	{"stop", "stop", false},
	{"clear", "clear GPUs", false},
	{"write", ops.StepWriteUnit, false},
	{"start", ops.StepStart, false},
	{"ready", "wait until ready", false},
	{"verify", "verify", false},
	{"benchmark", "benchmark", true},
	{"final", "", true},
}

// TestStoreBlipAtEachStepBoundary takes opsbot's store away at each step
// boundary of `mtp steps N` on the lab, on both drivers (SQLite made to
// refuse writes as a read-only database does; PostgreSQL cut off by a
// proxy that drops every connection), lets the job end on its host, then
// gives the store back. Once the store takes writes again, the job is
// recorded with what happened on the host: the outcome (succeeded with
// its benchmark row when every step completed; else failed naming the
// store, with no benchmark row), its end time (when it ended on the host,
// not when the store came back), every event it reported, in order; and
// its status message shows that final state.
func TestStoreBlipAtEachStepBoundary(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		var app *bot.App
		testStoreBlips(t, "", func() {
			if err := app.Store.RefuseWrites(context.Background(), true); err != nil {
				t.Error(err) // (on the job's goroutine)
			}
		}, func() {
			if err := app.Store.RefuseWrites(context.Background(), false); err != nil {
				t.Fatal(err)
			}
		}, &app)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.Skip(t)
		proxy, url := pgtest.NewProxy(t, pgtest.Database(t))
		testStoreBlips(t, url, proxy.Cut, proxy.Restore, new(*bot.App))
	})
}

// blip stands between the lab's pipeline and the runtime: it takes the
// store away (away) at the armed boundary and waits until the job's
// thread says the store refuses writes, so the job knows before its next
// step. It keeps every event the pipeline reported.
type blip struct {
	away func()
	chat *chatrec.Recorder
	st   func() *store.Store

	mu       sync.Mutex
	step     string // the armed boundary: a step's name, "" for final
	fired    bool
	reported []ops.Event
}

func (b *blip) arm(step string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.step, b.fired, b.reported = step, false, nil
}

func (b *blip) wrap(inner jobs.Backend) jobs.Backend {
	return blipBackend{b: b, inner: inner}
}

type blipBackend struct {
	b     *blip
	inner jobs.Backend
}

func (w blipBackend) Run(ctx context.Context, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	b := w.b
	res, err := w.inner.Run(ctx, hold, cmd, ops.ReporterFunc(func(ev ops.Event) {
		if ev.At.IsZero() {
			ev.At = time.Now()
		}
		b.mu.Lock()
		b.reported = append(b.reported, ev)
		fire := !b.fired && b.step != "" && ev.Step == b.step && ev.Status == ops.StepDone
		b.fired = b.fired || fire
		b.mu.Unlock()
		if fire {
			b.away()
		}
		rep.Report(ev)
		if fire {
			b.waitRefused(hold.JobID)
		}
	}))
	b.mu.Lock()
	fire := !b.fired && b.step == ""
	b.fired = b.fired || fire
	n := len(b.reported)
	b.mu.Unlock()
	if fire {
		// Every event stored first: the job's end is the first write refused.
		testkit.Poll(time.Minute, func() bool {
			evs, _ := b.st().Events(context.Background(), hold.JobID)
			return len(evs) == n
		})
		b.away()
	}
	return res, err
}

// waitRefused waits until job id's thread says the store refuses writes.
func (b *blip) waitRefused(id int64) {
	want := fmt.Sprintf("#%d: opsbot's store refuses writes", id)
	testkit.Poll(time.Minute, func() bool {
		for _, m := range b.chat.Replies() {
			if strings.Contains(m.Text, want) {
				return true
			}
		}
		return false
	})
}

// testStoreBlips runs every boundary of blipBoundaries, one job after the
// other, on one lab and one App whose store is at pgURL (SQLite when ""),
// taken away by away and given back by back; *app is set to the App.
func testStoreBlips(t *testing.T, pgURL string, away, back func(), app **bot.App) {
	l := labtest.Start(t, lab.Options{TimeScale: 50, LoadTime: 5 * time.Second})
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.WaitReady(wctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	path, err := l.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if pgURL != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := regexp.MustCompile(`(?m)^store: .*$`).ReplaceAllLiteralString(string(b), `store: {driver: postgres, url: "`+pgURL+`"}`)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := &blip{away: away, st: func() *store.Store { return (*app).Store }}
	// The store stays away for a second or two, within the lease's TTL; a
	// release it refused is retried at the next heartbeat (TTL/3), which the
	// next job waits for.
	a, chat := apptest.TopologyWrapped(t, l.Topology(), path, "limits: {lease_ttl: 15s}\n", b.wrap)
	*app, b.chat = a, chat
	for i, c := range blipBoundaries {
		t.Run(c.name, func(t *testing.T) {
			storeBlip(t, a, chat, b, back, fmt.Sprintf("mtp steps %d qwen", 4+i), c.step, c.succeeds)
		})
	}
}

// storeBlip runs command with the store taken away at boundary step (see
// blipBoundaries) and checks what is recorded once back gives it back.
func storeBlip(t *testing.T, app *bot.App, chat *chatrec.Recorder, b *blip, back func(), command, step string, succeeds bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b.arm(step)
	r := app.Handle(ctx, bot.Request{Platform: "console", User: "tester", Room: "terminal", Text: command, Confirmed: true})
	if r.Outcome != bot.Queued {
		t.Fatalf("%s: %s %q", command, r.Outcome, r.Text)
	}
	gaveBack := false
	defer func() {
		if !gaveBack {
			back()
		}
	}()
	if _, _, err := app.Engine.Result(ctx, r.JobID); err != nil {
		t.Fatal(err)
	}
	hostEnded := time.Now()
	b.mu.Lock()
	fired, reported := b.fired, append([]ops.Event(nil), b.reported...)
	b.mu.Unlock()
	if !fired {
		t.Fatalf("the job never reached the boundary; it reported %+v", reported)
	}
	want := store.Failed
	if succeeds {
		want = store.Succeeded
	}
	u, ok := app.Engine.Unrecorded(r.JobID)
	if !ok || u.Ending.Status != want {
		t.Fatalf("while the store is away, the engine keeps its end %v: %s %q; want it kept, %s", ok, u.Ending.Status, u.Ending.Error, want)
	}
	returned := time.Now()
	back()
	gaveBack = true
	var j store.Job
	testkit.WaitFor(t, time.Minute, "the job's end recorded once the store is back", func() bool {
		j, _ = app.Store.Job(ctx, r.JobID)
		return j.Status.Final()
	})
	if j.Status != want || (want == store.Failed) != strings.Contains(j.Error, "store refuses writes") {
		t.Errorf("recorded %s %q; want %s (naming the store when it failed)", j.Status, j.Error, want)
	}
	if j.EndedAt.Before(j.StartedAt) || j.EndedAt.After(hostEnded) || !j.EndedAt.Before(returned) {
		t.Errorf("ended at %s; want when it ended on the host (started %s, ended by %s), before the store came back at %s",
			j.EndedAt.Format(time.StampMicro), j.StartedAt.Format(time.StampMicro), hostEnded.Format(time.StampMicro), returned.Format(time.StampMicro))
	}
	checkBlipRecord(t, app, chat, j, reported, succeeds)
}

// checkBlipRecord checks job j's events (every one reported, in order),
// its benchmark row (one when it succeeded, else none) and the final edit
// of its status message, once the store holds them.
func checkBlipRecord(t *testing.T, app *bot.App, chat *chatrec.Recorder, j store.Job, reported []ops.Event, succeeds bool) {
	ctx := context.Background()
	var stored []store.Event
	testkit.WaitFor(t, time.Minute, "every event recorded", func() bool {
		stored, _ = app.Store.Events(ctx, j.ID)
		return len(stored) >= len(reported)
	})
	var got, want []string
	for _, e := range stored {
		got = append(got, e.Step+" "+e.Status+": "+e.Message)
	}
	for _, e := range reported {
		want = append(want, e.Step+" "+string(e.Status)+": "+e.Message)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events recorded:\n%s\nwant every one reported, in order:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rows, err := app.Store.BenchHistory(ctx, "qwen", 100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, row := range rows {
		if row.JobID == j.ID {
			n++
		}
	}
	if wantRows := map[bool]int{true: 1, false: 0}[succeeds]; n != wantRows {
		t.Errorf("%d benchmark rows of job #%d, want %d", n, j.ID, wantRows)
	}
	testkit.WaitFor(t, time.Minute, "the status message shows the recorded end", func() bool {
		edits, _ := chat.Thread(j.Thread)
		return len(edits) > 0 && edits[len(edits)-1].Final && edits[len(edits)-1].Status == bot.Status(j.Status)
	})
}
