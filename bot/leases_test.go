package bot

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/opsbot/opsbot/auth"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// newLeaseHarness is a bot on the store file at path with its own Store
// handle and its own lease owner, as a separate opsbot process has.
func newLeaseHarness(t *testing.T, path string, ttl time.Duration, backend func(h *harness) jobs.Backend) (*harness, *leases.Leases) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	locker, err := leases.New(ctx, st, leases.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: st, chat: chatrec.New(), leases: locker}
	auth, err := auth.New("none", roles)
	if err != nil {
		t.Fatal(err)
	}
	h.eng = jobs.NewEngine(jobs.EngineOptions{Store: st, Backend: backend(h), Chats: map[string]Chat{"test": h.chat},
		JobTimeout: time.Minute, Leases: locker})
	h.disp = NewDispatcher(DispatcherOptions{Store: st, Engine: h.eng, Auth: auth,
		Commands: commands.Options{Services: []commands.ServiceRef{{Name: "qwen", Host: "gpu1"}, {Name: "llama", Host: "gpu1"}},
			Hosts: []string{"gpu1", "pve"}},
		ConfirmTTL: time.Minute})
	t.Cleanup(func() {
		h.eng.Close()
		st.Close()
	})
	return h, locker
}

// span is when a mutating pipeline ran, by the wall clock of this machine.
type span struct {
	job        string
	start, end time.Time
}

// A job holds its service's lease for its whole run, and its node's lease
// while the pipeline asks; a job of another process on the same service
// waits, told who holds it, and never overlaps; a job on another service
// runs at once; the other process's start-up recovery leaves the running
// job alone.
func TestServiceLeaseHeldForWholeRunAcrossProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	var mu sync.Mutex
	var spans []span
	release := make(chan struct{})
	running := make(chan string, 4)
	pipeline := func(h *harness) jobs.Backend {
		return jobtest.HeldFunc(func(ctx context.Context, jh ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
			s := span{job: commands.Text(cmd), start: time.Now()}
			defer func() {
				s.end = time.Now()
				mu.Lock()
				spans = append(spans, s)
				mu.Unlock()
			}()
			// The service lease is held by this job while it runs.
			ls, err := h.store.Leases(ctx)
			if err != nil {
				return nil, err
			}
			held := false
			for _, l := range ls {
				held = held || (l.Key == "service:"+commands.Where(cmd).Service && l.JobID == jh.JobID && l.Owner == h.leases.Owner().ID)
			}
			if !held {
				return nil, fmt.Errorf("service lease not held by this job: %+v", ls)
			}
			if jh.Epoch < 1 || jh.Check() != nil {
				return nil, fmt.Errorf("job hold: epoch %d, check %v", jh.Epoch, jh.Check())
			}
			hold, err := h.leases.LockFor(ctx, "node:pve", jh.JobID, nil)
			if err != nil {
				return nil, err
			}
			if hold.Epoch < 1 || hold.Check() != nil {
				return nil, fmt.Errorf("node hold: epoch %d, check %v", hold.Epoch, hold.Check())
			}
			ls, err = h.store.Leases(ctx)
			if err != nil {
				return nil, err
			}
			nodeHeld := false
			for _, l := range ls {
				nodeHeld = nodeHeld || (l.Key == "node:pve" && l.JobID == jh.JobID)
			}
			hold.Release()
			if !nodeHeld {
				return nil, fmt.Errorf("node lease not held by this job: %+v", ls)
			}
			running <- commands.Text(cmd)
			if cmd.Spec().Path == "mtp steps" && commands.Where(cmd).Service == "qwen" {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &ops.Result{Summary: "done"}, nil
		})
	}
	a, _ := newLeaseHarness(t, path, time.Minute, pipeline)
	b, _ := newLeaseHarness(t, path, time.Minute, pipeline)

	first := a.handle("olga", "mtp steps 4 qwen")
	if got := <-running; got != "mtp steps 4 qwen" {
		t.Fatalf("running %q", got)
	}
	if got, err := b.eng.RecoverInterrupted(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("the second process's recovery interrupted %+v, %v", got, err)
	}
	second := b.handle("olga", "svc restart qwen")
	other := b.handle("olga", "mtp steps 5 llama") // another service: runs at once
	if got := <-running; !strings.HasPrefix(got, "mtp steps 5 llama") {
		t.Fatalf("running %q, want the llama job", got)
	}
	if j := b.wait(other.JobID); j.Status != store.Succeeded {
		t.Fatalf("llama job: %s %s", j.Status, j.Error)
	}
	want := fmt.Sprintf("waiting for qwen: job #%d of opsbot on ", first.JobID)
	testkit.WaitFor(t, 10*time.Second, "the second job says who holds qwen", func() bool {
		ok := false
		for _, id := range []string{"1", "2", "3", "4", "5"} {
			edits, _ := b.chat.Thread(id)
			for _, m := range edits {
				ok = ok || (strings.Contains(m.Text, want) && strings.Contains(m.Text, fmt.Sprintf("(pid %d) is changing it", os.Getpid())))
			}
		}
		return ok
	})
	if j, _ := b.store.Job(context.Background(), second.JobID); j.Status != store.Queued {
		t.Fatalf("second job on qwen is %s while the first holds it, want queued", j.Status)
	}
	close(release)
	for _, r := range []struct {
		h  *harness
		id int64
	}{{a, first.JobID}, {b, second.JobID}} {
		if j := r.h.wait(r.id); j.Status != store.Succeeded {
			t.Fatalf("job #%d: %s %s", r.id, j.Status, j.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var q []span
	for _, s := range spans {
		if strings.Contains(s.job, "qwen") {
			q = append(q, s)
		}
	}
	if len(q) != 2 || !q[1].start.After(q[0].end) {
		t.Fatalf("qwen jobs overlapped or did not both run: %+v", q)
	}
	ls, _ := a.store.Leases(context.Background())
	if len(ls) != 0 {
		t.Fatalf("leases left after every job ended: %+v", ls)
	}
}

// cancel of a job run by another live process reaches it through the store.
func TestCancelReachesAnotherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	started := make(chan struct{}, 1)
	blocking := func(*harness) jobs.Backend {
		return jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, fmt.Errorf("wait until ready: %w", ctx.Err())
		})
	}
	a, _ := newLeaseHarness(t, path, 3*time.Second, blocking)
	b, _ := newLeaseHarness(t, path, 3*time.Second, blocking)
	job := a.handle("olga", "mtp steps 4 qwen")
	<-started
	r := b.handle("olga", fmt.Sprintf("cancel %d", job.JobID))
	if r.Outcome != Answered || !strings.Contains(r.Text, "running in another opsbot process on ") {
		t.Fatalf("cancel from the other process: %s %q", r.Outcome, r.Text)
	}
	j := a.wait(job.JobID)
	if j.Status != store.Cancelled || !strings.Contains(j.Error, "cancelled on request") {
		t.Fatalf("job after a cancel from another process: %s %q", j.Status, j.Error)
	}
}

// A lease taken over while its holder still runs (the holder stalled past
// the expiry) stops the holder's job with a clear cause instead of letting
// two writers go on.
func TestLostLeaseStopsTheJob(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	started := make(chan struct{}, 1)
	a, locker := newLeaseHarness(t, path, 600*time.Millisecond, func(*harness) jobs.Backend {
		return jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, fmt.Errorf("wait until ready: %w", ctx.Err())
		})
	})
	job := a.handle("olga", "mtp steps 4 qwen")
	<-started
	// Another process takes the lease over, as it may once the holder's
	// heartbeat is late past the expiry (here the row is rewritten directly:
	// stalling this process's heartbeat on purpose cannot be done reliably).
	thief := rawDBFor(t, path)
	if _, err := thief.Exec(`INSERT INTO owners (id, host, pid, machine, started_at, heartbeat_at, expires_at) VALUES ('thief', 'x', 1, '', 0, 0, ?)`,
		time.Now().Add(time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	res, err := thief.Exec(`UPDATE leases SET owner = 'thief', job_id = 999 WHERE key = 'service:qwen' AND owner = ?`, locker.Owner().ID)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("steal the lease: %v (%d rows)", err, n)
	}
	j := a.wait(job.JobID)
	if j.Status != store.Failed || !strings.Contains(j.Error, "lost its hold on service qwen") || !strings.Contains(j.Error, "`svc status qwen`") {
		t.Fatalf("job after its lease was taken: %s %q", j.Status, j.Error)
	}
	// The thief's lease is untouched by the stopped job's release.
	var owner string
	if err := thief.QueryRow(`SELECT owner FROM leases WHERE key = 'service:qwen'`).Scan(&owner); err != nil || owner != "thief" {
		t.Fatalf("lease after the stopped job released: %q, %v", owner, err)
	}
}

// rawDBFor opens the store's file directly, as another process would.
func rawDBFor(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// An owner whose record vanished (its heartbeat cannot renew anything) stops
// its jobs rather than go on unprotected, and registers again.
func TestVanishedOwnerStopsItsJobs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	started := make(chan struct{}, 1)
	a, locker := newLeaseHarness(t, path, 600*time.Millisecond, func(*harness) jobs.Backend {
		return jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, fmt.Errorf("wait until ready: %w", ctx.Err())
		})
	})
	job := a.handle("olga", "mtp steps 4 qwen")
	<-started
	db := rawDBFor(t, path)
	if _, err := db.Exec(`DELETE FROM owners WHERE id = ?`, locker.Owner().ID); err != nil {
		t.Fatal(err)
	}
	j := a.wait(job.JobID)
	if j.Status != store.Failed || !strings.Contains(j.Error, "lost its hold on service qwen") {
		t.Fatalf("job after its owner vanished: %s %q", j.Status, j.Error)
	}
	testkit.WaitFor(t, 10*time.Second, "the process registers again", func() bool {
		var n int
		_ = db.QueryRow(`SELECT COUNT(*) FROM owners WHERE id = ?`, locker.Owner().ID).Scan(&n)
		return n == 1
	})
}
