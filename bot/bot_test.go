package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/opsbot/opsbot/auth"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

type harness struct {
	t     testing.TB
	store *store.Store
	eng   *jobs.Engine
	disp  *Dispatcher
	chat  *chatrec.Recorder
	now   atomic.Pointer[time.Time]
	// leases is the engine's lease owner (newLeaseHarness), nil otherwise.
	leases *leases.Leases
}

func newHarness(t testing.TB, backend jobs.Backend, users map[string]string) *harness {
	t.Helper()
	return newHarnessWith(t, backend, users, nil)
}

// newHarnessWith is newHarness with the engine's options changed by opts
// (nil: none) before the engine starts.
func newHarnessWith(t testing.TB, backend jobs.Backend, users map[string]string, opts func(*jobs.EngineOptions)) *harness {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: st, chat: chatrec.New()}
	auth, err := auth.New("none", users)
	if err != nil {
		t.Fatal(err)
	}
	eo := jobs.EngineOptions{Store: st, Backend: backend, Chats: map[string]Chat{"test": h.chat}, JobTimeout: time.Minute}
	if opts != nil {
		opts(&eo)
	}
	h.eng = jobs.NewEngine(eo)
	h.disp = NewDispatcher(DispatcherOptions{Store: st, Engine: h.eng, Auth: auth,
		Commands: commands.Options{Services: []commands.ServiceRef{{Name: "qwen", Host: "gpu1"}, {Name: "llama", Host: "gpu2"}},
			Hosts: []string{"gpu1", "gpu2", "pve"}},
		ConfirmTTL: time.Minute,
		Now: func() time.Time {
			if p := h.now.Load(); p != nil {
				return *p
			}
			return time.Now()
		}})
	t.Cleanup(func() {
		h.eng.Close()
		st.Close()
	})
	return h
}

func (h *harness) handle(user, text string) Reply {
	return h.disp.Handle(context.Background(), Request{Platform: "test", User: user, Room: "ops", Text: text})
}

func (h *harness) wait(id int64) store.Job {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := h.eng.Wait(ctx, id)
	if err != nil {
		h.t.Fatalf("wait for job #%d: %v", id, err)
	}
	return j
}

var roles = map[string]string{"test:alice": "admin", "test:olga": "operator", "test:vic": "viewer"}

func TestUsageErrorStartsNothing(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, jobtest.Func(func(context.Context, commands.Job, ops.Reporter) (*ops.Result, error) {
		ran.Add(1)
		return &ops.Result{}, nil
	}), roles)
	for _, text := range []string{"mtp steps 40", "mtp steps 10; rm -rf /", "mtp steps $(reboot)", "frobnicate", "mtp steps"} {
		r := h.handle("alice", text)
		if r.Outcome != Invalid || r.Text == "" || r.JobID != 0 {
			t.Errorf("%q: outcome %s job %d text %q; want invalid with a message and no job", text, r.Outcome, r.JobID, r.Text)
		}
	}
	jobs, err := h.store.ListJobs(context.Background(), store.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 0 || ran.Load() != 0 {
		t.Fatalf("usage errors created %d jobs and ran %d pipelines", len(jobs), ran.Load())
	}
	audit, err := h.store.Audit(context.Background(), store.AuditFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 5 {
		t.Fatalf("want every invalid command audited, got %d audit rows", len(audit))
	}
}

func TestRefusedSaysWhichRoleAndIsRecorded(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, jobtest.Func(func(context.Context, commands.Job, ops.Reporter) (*ops.Result, error) {
		ran.Add(1)
		return &ops.Result{}, nil
	}), roles)
	cases := []struct{ user, text, need string }{
		{"vic", "mtp steps 10 qwen", "operator"},
		{"mallory", "svc status qwen", "viewer"}, // unknown users get no role: deny by default
		{"olga", "schedule add \"0 3 * * *\" sweep qwen steps 1..5", "admin"},
		{"olga", "gpu recover qwen --force", "admin"},
	}
	for _, c := range cases {
		r := h.handle(c.user, c.text)
		if r.Outcome != Refused {
			t.Errorf("%s %q: outcome %s, want refused", c.user, c.text, r.Outcome)
			continue
		}
		if !strings.Contains(r.Text, c.need) {
			t.Errorf("%s %q: refusal %q does not name role %s", c.user, c.text, r.Text, c.need)
		}
		j, err := h.store.Job(context.Background(), r.JobID)
		if err != nil || j.Status != store.Refused {
			t.Errorf("%s %q: job row %+v err %v, want status refused", c.user, c.text, j, err)
		}
	}
	if ran.Load() != 0 {
		t.Fatalf("a refused command ran")
	}
}

func TestJobRunsAndRendersThread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	r := h.handle("olga", "/mtp steps 10 qwen")
	if r.Outcome != Queued {
		t.Fatalf("outcome %s: %s", r.Outcome, r.Text)
	}
	j := h.wait(r.JobID)
	if j.Status != store.Succeeded {
		t.Fatalf("status %s error %q", j.Status, j.Error)
	}
	if j.Service != "qwen" || j.Host != "gpu1" {
		t.Fatalf("job target %s/%s, want qwen/gpu1 (the only... first service resolution)", j.Service, j.Host)
	}
	evs, err := h.store.Events(context.Background(), j.ID)
	if err != nil || len(evs) != 2 {
		t.Fatalf("events %v err %v, want 2", evs, err)
	}
	edits, replies := h.chat.Thread(j.Thread)
	if len(edits) == 0 || !edits[len(edits)-1].Final || !strings.Contains(edits[len(edits)-1].Text, "succeeded") {
		t.Fatalf("final status edit missing: %+v", edits)
	}
	var all strings.Builder
	for _, m := range replies {
		all.WriteString(m.Text + "\n")
	}
	for _, want := range []string{"work: doing mtp steps 10", "work: done", "all good"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("thread lacks %q:\n%s", want, all.String())
		}
	}
}

func TestOneMutatingJobPerHost(t *testing.T) {
	t.Parallel()
	var running, maxRunning atomic.Int32
	release := make(chan struct{})
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		if !cmd.Spec().Mutating {
			return &ops.Result{Summary: "read"}, nil
		}
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &ops.Result{}, nil
	}), roles)
	a := h.handle("olga", "mtp steps 4 qwen")
	testkit.WaitFor(t, 10*time.Second, "first job running", func() bool { return running.Load() == 1 })
	b := h.handle("olga", "svc restart qwen")
	c := h.handle("olga", "mtp steps 5 llama") // another host: runs at once
	testkit.WaitFor(t, 10*time.Second, "two jobs running", func() bool { return running.Load() == 2 })
	// A read-only command never waits behind the lock.
	ro := h.handle("vic", "svc status qwen")
	if j := h.wait(ro.JobID); j.Status != store.Succeeded {
		t.Fatalf("read-only job: %s %s", j.Status, j.Error)
	}
	jb, _ := h.store.Job(context.Background(), b.JobID)
	if jb.Status != store.Queued {
		t.Fatalf("second job on gpu1 is %s while the first holds the lock, want queued", jb.Status)
	}
	close(release)
	for _, r := range []Reply{a, b, c} {
		if j := h.wait(r.JobID); j.Status != store.Succeeded {
			t.Fatalf("job #%d: %s %s", r.JobID, j.Status, j.Error)
		}
	}
	if maxRunning.Load() != 2 {
		t.Fatalf("max concurrent mutating jobs %d, want 2 (one per host)", maxRunning.Load())
	}
}

func TestCancelRunningAndQueued(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 2)
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, fmt.Errorf("wait for engine: %w", ctx.Err())
	}), roles)
	a := h.handle("olga", "mtp steps 4 qwen")
	if a.Outcome != Queued {
		t.Fatalf("first job: %s %s", a.Outcome, a.Text)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("first job never started")
	}
	b := h.handle("olga", "mtp steps 5 qwen")
	if r := h.handle("olga", fmt.Sprintf("cancel %d", b.JobID)); r.Outcome != Answered {
		t.Fatalf("cancel queued: %s %s", r.Outcome, r.Text)
	}
	if j := h.wait(b.JobID); j.Status != store.Cancelled {
		t.Fatalf("queued job after cancel: %s", j.Status)
	}
	if r := h.handle("olga", fmt.Sprintf("cancel #%d", a.JobID)); r.Outcome != Answered {
		t.Fatalf("cancel running: %s %s", r.Outcome, r.Text)
	}
	j := h.wait(a.JobID)
	if j.Status != store.Cancelled || !strings.Contains(j.Error, "cancelled") {
		t.Fatalf("running job after cancel: %s %q", j.Status, j.Error)
	}
	if r := h.handle("olga", fmt.Sprintf("cancel %d", a.JobID)); r.Outcome != Invalid {
		t.Fatalf("cancel of a finished job: %s, want invalid", r.Outcome)
	}
}

func TestTimeoutAndPanicFailOnlyThatJob(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		switch cmd.(*commands.MTPSteps).Steps {
		case 6:
			panic("boom")
		case 7:
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &ops.Result{}, nil
	}), roles, func(o *jobs.EngineOptions) { o.JobTimeout = 50 * time.Millisecond })
	p := h.handle("olga", "mtp steps 6 qwen")
	to := h.handle("olga", "mtp steps 7 llama")
	if j := h.wait(p.JobID); j.Status != store.Failed || !strings.Contains(j.Error, "boom") {
		t.Fatalf("panicking job: %s %q", j.Status, j.Error)
	}
	if j := h.wait(to.JobID); j.Status != store.Failed || !strings.Contains(j.Error, "timed out") {
		t.Fatalf("slow job: %s %q", j.Status, j.Error)
	}
	ok := h.handle("olga", "mtp steps 8 qwen")
	if j := h.wait(ok.JobID); j.Status != store.Succeeded {
		t.Fatalf("job after a panic: %s %q", j.Status, j.Error)
	}
}

func TestInterruptedJobsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.CreateJob(ctx, store.Job{Command: "mtp steps 10 qwen", Platform: "test", User: "olga", Room: "ops", Service: "qwen", Host: "gpu1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.StartJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	st.Close()

	st, err = store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	chat := chatrec.New()
	eng := jobs.NewEngine(jobs.EngineOptions{Store: st, Backend: jobtest.OK(), Chats: map[string]Chat{"test": chat}})
	defer eng.Close()
	got, err := eng.RecoverInterrupted(ctx)
	if err != nil || len(got) != 1 || got[0].ID != j.ID {
		t.Fatalf("recovered %v err %v", got, err)
	}
	row, _ := st.Job(ctx, j.ID)
	if row.Status != store.Interrupted {
		t.Fatalf("status %s, want interrupted", row.Status)
	}
	if posts := chat.Posts(); len(posts) != 1 || !strings.Contains(posts[0].Text, "interrupted") {
		t.Fatalf("room not told: %+v", posts)
	}
}

func TestBenchResultComparedWithPrevious(t *testing.T) {
	t.Parallel()
	tok := 200.0
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		tok += 50
		b := &ops.BenchResult{OutputTokS: tok, AcceptLen: 3.1, RequestsOK: 8, Settings: benchLoad(16, 1, 256, 256)}
		return &ops.Result{Bench: b, Spec: &ops.Spec{Engine: "sglang", Steps: 3, TopK: 1, DraftTokens: 4}}, nil
	}), roles)
	first := h.wait(h.handle("olga", "bench qwen").JobID)
	second := h.wait(h.handle("olga", "bench qwen").JobID)
	var res ops.Result
	if err := json.Unmarshal(second.Result, &res); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("#%d", first.ID)
	if len(res.Details) == 0 || !strings.Contains(res.Details[0], want) || !strings.Contains(res.Details[0], "+20.0%") {
		t.Fatalf("details %q: want a comparison with %s (+20.0%%)", res.Details, want)
	}
	hist := h.handle("vic", "history qwen")
	if hist.Outcome != Answered || !strings.Contains(hist.Text, "300.0") || !strings.Contains(hist.Text, "250.0") {
		t.Fatalf("history: %s %q", hist.Outcome, hist.Text)
	}
}

// After a change of settings the result also stands beside the service's
// previous result, at the old settings.
func TestBenchResultComparedWithOtherSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		steps, tok := 3, 200.0
		if c, ok := cmd.(*commands.MTPSteps); ok {
			steps, tok = c.Steps, 280.0
		}
		b := &ops.BenchResult{OutputTokS: tok, AcceptLen: 3.1, RequestsOK: 8, Settings: benchLoad(16, 1, 256, 256)}
		return &ops.Result{Bench: b, Spec: &ops.Spec{Engine: "sglang", Steps: steps, TopK: 1, DraftTokens: steps + 1}}, nil
	}), roles)
	first := h.wait(h.handle("olga", "bench qwen").JobID)
	changed := h.wait(h.handle("olga", "mtp steps 10 qwen").JobID)
	var res ops.Result
	if err := json.Unmarshal(changed.Result, &res); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(res.Details, "\n")
	if !strings.Contains(all, "before, at steps=3,topk=1,draft=4") || !strings.Contains(all, fmt.Sprintf("#%d", first.ID)) ||
		!strings.Contains(all, "+40.0%") {
		t.Fatalf("details %q: want a comparison with #%d at steps 3 (+40.0%%)", res.Details, first.ID)
	}
}

// Each benchmarked point of a sweep is kept in the service's history.
func TestSweepPointsJoinHistory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		res := &ops.Result{}
		for _, n := range cmd.(*commands.Sweep).Steps {
			b := &ops.BenchResult{OutputTokS: 100.0 * float64(n), AcceptLen: 2.0, RequestsOK: 4}
			res.Points = append(res.Points, ops.SweepPoint{Steps: n, OK: true, Bench: b,
				Spec: &ops.Spec{Engine: "sglang", Steps: n, TopK: 1, DraftTokens: n + 1}})
		}
		return res, nil
	}), roles)
	if j := h.wait(h.handle("olga", "sweep qwen steps 2,5").JobID); j.Status != store.Succeeded {
		t.Fatalf("sweep: %s %s", j.Status, j.Error)
	}
	hist, err := h.store.BenchHistory(context.Background(), "qwen", 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("history %+v err %v, want the 2 points", hist, err)
	}
	if hist[0].Settings != "steps=5,topk=1,draft=6" || hist[0].OutputTokS != 500 || hist[1].Settings != "steps=2,topk=1,draft=3" {
		t.Fatalf("history %+v", hist)
	}
}
