package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

func register(t *testing.T, s *Store, id string, ttl time.Duration) Owner {
	t.Helper()
	o, err := s.RegisterOwner(context.Background(), Owner{ID: id, Host: "host-" + id, PID: 100, Machine: "m1"}, ttl)
	if err != nil {
		t.Fatalf("RegisterOwner(%s): %v", id, err)
	}
	return o
}

func testLeaseAcquireReleaseAndHolder(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	register(t, s, "a", time.Minute)
	register(t, s, "b", time.Minute)

	a, err := s.AcquireLease(ctx, "service:qwen", "a", 7, time.Minute)
	if err != nil || !a.Acquired || a.TookOver() {
		t.Fatalf("first acquire = %+v, %v; want acquired, no takeover", a, err)
	}
	b, err := s.AcquireLease(ctx, "service:qwen", "b", 8, time.Minute)
	if err != nil || b.Acquired {
		t.Fatalf("second owner acquired a held lease: %+v, %v", b, err)
	}
	if b.Holder.Owner != "a" || b.Holder.JobID != 7 || b.Holder.Holder() != "job #7 of opsbot on host-a (pid 100)" {
		t.Fatalf("holder = %+v (%q)", b.Holder, b.Holder.Holder())
	}
	// The same owner's other job waits too: a lease is per job, not per process.
	if again, err := s.AcquireLease(ctx, "service:qwen", "a", 9, time.Minute); err != nil || again.Acquired {
		t.Fatalf("another job of the holder acquired it: %+v, %v", again, err)
	}
	// Another key is independent.
	if n, err := s.AcquireLease(ctx, "node:pve", "b", 8, time.Minute); err != nil || !n.Acquired {
		t.Fatalf("acquire another key = %+v, %v", n, err)
	}
	if err := s.ReleaseLease(ctx, "service:qwen", "b", 8); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("release by a non-holder = %v, want ErrLeaseLost", err)
	}
	if err := s.ReleaseLease(ctx, "service:qwen", "a", 7); err != nil {
		t.Fatalf("release: %v", err)
	}
	if b, err := s.AcquireLease(ctx, "service:qwen", "b", 8, time.Minute); err != nil || !b.Acquired || b.TookOver() {
		t.Fatalf("acquire after release = %+v, %v", b, err)
	}
	if _, err := s.AcquireLease(ctx, "", "a", 1, time.Minute); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty key: %v, want ErrInvalid", err)
	}
	if _, err := s.AcquireLease(ctx, "k", "a", 1, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("zero ttl: %v, want ErrInvalid", err)
	}
}

func TestLeaseAcquireReleaseAndHolder(t *testing.T) {
	t.Parallel()
	eachDriver(t, testLeaseAcquireReleaseAndHolder)
}

// A lease whose holder stopped renewing is taken over after its expiry, and
// the old holder learns it lost it: its heartbeat no longer returns the key
// and its release changes nothing.
func testLeaseTakeoverAfterExpiry(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	const ttl = 200 * time.Millisecond
	register(t, s, "a", time.Minute) // a's process lives on, but stalls on this lease
	register(t, s, "b", time.Minute)
	start := time.Now()
	if a, err := s.AcquireLease(ctx, "service:qwen", "a", 1, ttl); err != nil || !a.Acquired {
		t.Fatalf("acquire = %+v, %v", a, err)
	}
	var got Acquisition
	testkit.WaitFor(t, 10*time.Second, "b to take the expired lease over", func() bool {
		var err error
		got, err = s.AcquireLease(ctx, "service:qwen", "b", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return got.Acquired
	})
	if took := time.Since(start); took < ttl || time.Now().Before(got.Holder.ExpiresAt) {
		t.Fatalf("taken over after %s, before the ttl %s (expiry %s)", took, ttl, got.Holder.ExpiresAt)
	}
	if !got.TookOver() || got.Holder.Owner != "a" || got.Holder.JobID != 1 {
		t.Fatalf("takeover = %+v, want from a's job 1", got)
	}
	keys, err := s.Heartbeat(ctx, "a", time.Minute)
	if err != nil || len(keys) != 0 {
		t.Fatalf("a's heartbeat after the takeover renewed %v, %v; want nothing", keys, err)
	}
	if err := s.ReleaseLease(ctx, "service:qwen", "a", 1); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a's release after the takeover = %v, want ErrLeaseLost", err)
	}
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 1 || ls[0].Owner != "b" {
		t.Fatalf("leases = %+v, %v; want b's", ls, err)
	}
}

func TestLeaseTakeoverAfterExpiry(t *testing.T) {
	t.Parallel()
	eachDriver(t, testLeaseTakeoverAfterExpiry)
}

// Heartbeats keep a lease held past its ttl; a dead owner (no heartbeat)
// frees its leases at its own expiry even when the lease's is later, and
// ExpireOwner frees them at once.
func testHeartbeatKeepsLeasesAndOwnerDeathFreesThem(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	const ttl = 300 * time.Millisecond
	register(t, s, "a", ttl)
	register(t, s, "b", time.Minute)
	if a, err := s.AcquireLease(ctx, "service:qwen", "a", 1, ttl); err != nil || !a.Acquired {
		t.Fatalf("acquire = %+v, %v", a, err)
	}
	// Renew for longer than several ttls: b never gets it.
	end := time.Now().Add(4 * ttl)
	for time.Now().Before(end) {
		keys, err := s.Heartbeat(ctx, "a", ttl)
		if err != nil || len(keys) != 1 || keys[0] != "service:qwen" {
			t.Fatalf("heartbeat = %v, %v", keys, err)
		}
		if b, err := s.AcquireLease(ctx, "service:qwen", "b", 2, time.Minute); err != nil || b.Acquired {
			t.Fatalf("b took a renewed lease: %+v, %v", b, err)
		}
		time.Sleep(ttl / 6) // the heartbeat interval being exercised
	}

	// An owner that is expired at once (its pid seen gone) frees its lease
	// even though the lease row's own expiry is a minute away.
	register(t, s, "c", time.Minute)
	if c, err := s.AcquireLease(ctx, "node:pve", "c", 3, time.Minute); err != nil || !c.Acquired {
		t.Fatalf("acquire = %+v, %v", c, err)
	}
	if ok, err := s.ExpireOwner(ctx, "c", 999, "m1"); err != nil || ok {
		t.Fatalf("ExpireOwner with the wrong pid = %v, %v; want no change", ok, err)
	}
	if ok, err := s.ExpireOwner(ctx, "c", 100, "other-machine"); err != nil || ok {
		t.Fatalf("ExpireOwner from another machine = %v, %v; want no change", ok, err)
	}
	if b, _ := s.AcquireLease(ctx, "node:pve", "b", 2, time.Minute); b.Acquired {
		t.Fatal("b took a live owner's lease")
	}
	if ok, err := s.ExpireOwner(ctx, "c", 100, "m1"); err != nil || !ok {
		t.Fatalf("ExpireOwner = %v, %v", ok, err)
	}
	if b, err := s.AcquireLease(ctx, "node:pve", "b", 2, time.Minute); err != nil || !b.TookOver() {
		t.Fatalf("acquire from a dead owner = %+v, %v", b, err)
	}
	if _, err := s.Heartbeat(ctx, "nobody", ttl); !errors.Is(err, ErrNotFound) {
		t.Errorf("heartbeat of an unknown owner = %v, want ErrNotFound", err)
	}
}

func TestHeartbeatKeepsLeasesAndOwnerDeathFreesThem(t *testing.T) {
	t.Parallel()
	eachDriver(t, testHeartbeatKeepsLeasesAndOwnerDeathFreesThem)
}

// Two Stores on one file (two connections, as two processes have) contend
// for one lease from many goroutines: exactly one holds it at any time.
func testLeaseContentionAcrossTwoStores(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	s1, s2 := drv.openAt(t, path), drv.openAt(t, path)
	register(t, s1, "one", time.Minute)
	register(t, s2, "two", time.Minute)

	var mu sync.Mutex
	holders := 0
	maxHolders := 0
	acquired := 0
	var wg sync.WaitGroup
	for i := range 8 {
		s, owner := s1, "one"
		if i%2 == 1 {
			s, owner = s2, "two"
		}
		job := int64(i + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 5; {
				a, err := s.AcquireLease(ctx, "service:qwen", owner, job, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if !a.Acquired {
					time.Sleep(time.Millisecond) // polling for the lease, as the bot does
					continue
				}
				mu.Lock()
				holders++
				acquired++
				maxHolders = max(maxHolders, holders)
				mu.Unlock()
				mu.Lock()
				holders--
				mu.Unlock()
				if err := s.ReleaseLease(ctx, "service:qwen", owner, job); err != nil {
					t.Error(err)
					return
				}
				n++
			}
		}()
	}
	wg.Wait()
	if maxHolders != 1 || acquired != 40 {
		t.Fatalf("max holders at once = %d, acquisitions = %d; want 1 and 40", maxHolders, acquired)
	}
}

func TestLeaseContentionAcrossTwoStores(t *testing.T) {
	t.Parallel()
	eachDriver(t, testLeaseContentionAcrossTwoStores)
}

// Jobs carry their creator's owner; only a dead owner's unfinished jobs are
// interrupted.
func testInterruptUnfinishedSparesLiveOwners(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	s1, s2 := drv.openAt(t, path), drv.openAt(t, path)
	register(t, s1, "live", time.Minute)
	register(t, s2, "dying", time.Minute)
	live := mustCreate(t, s1, Job{Command: "mtp steps 6 qwen"})
	dead := mustCreate(t, s2, Job{Command: "svc restart qwen"})
	if live.Owner != "live" || dead.Owner != "dying" {
		t.Fatalf("owners = %q, %q", live.Owner, dead.Owner)
	}
	// The dispatcher's path (job and audit entry together) stamps it too;
	// a job recorded final (refused) has no owner to wait for.
	audited, err := s1.CreateJobAudited(ctx, Job{Command: "bench qwen"}, AuditEntry{Decision: DecisionAccepted})
	if err != nil || audited.Owner != "live" {
		t.Fatalf("CreateJobAudited owner = %q, %v", audited.Owner, err)
	}
	if refused := mustCreate(t, s1, Job{Command: "gpu recover", Status: Refused}); refused.Owner != "" {
		t.Fatalf("a refused job got owner %q", refused.Owner)
	}
	if got, err := s1.InterruptUnfinished(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("InterruptUnfinished with both owners live = %+v, %v", got, err)
	}
	if ok, err := s1.ExpireOwner(ctx, "dying", 100, "m1"); err != nil || !ok {
		t.Fatalf("ExpireOwner = %v, %v", ok, err)
	}
	got, err := s1.InterruptUnfinished(ctx, nil)
	if err != nil || len(got) != 1 || got[0].ID != dead.ID || got[0].Status != Interrupted {
		t.Fatalf("InterruptUnfinished = %+v, %v; want only job %d", got, err, dead.ID)
	}
	if j, _ := s1.Job(ctx, live.ID); j.Status != Queued {
		t.Fatalf("the live owner's job became %s", j.Status)
	}
	if j, _ := s1.Job(ctx, audited.ID); j.Status != Queued || j.Owner != "live" {
		t.Fatalf("the live owner's audited job became %s (owner %q)", j.Status, j.Owner)
	}
	if o, ok, err := s1.JobOwner(ctx, live.ID); err != nil || !ok || o.Host != "host-live" {
		t.Fatalf("JobOwner = %+v, %v, %v", o, ok, err)
	}
	if _, ok, _ := s1.JobOwner(ctx, dead.ID); ok {
		t.Fatal("a dead owner reported live")
	}
	if err := s1.UnregisterOwner(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s1.InterruptUnfinished(ctx, nil); len(got) != 2 || got[0].ID != live.ID || got[1].ID != audited.ID {
		t.Fatalf("after unregistering, InterruptUnfinished = %+v", got)
	}
}

func TestInterruptUnfinishedSparesLiveOwners(t *testing.T) {
	t.Parallel()
	eachDriver(t, testInterruptUnfinishedSparesLiveOwners)
}

func testCancelRequests(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	s1, s2 := drv.openAt(t, path), drv.openAt(t, path)
	register(t, s1, "runner", time.Minute)
	j := mustCreate(t, s1, Job{Command: "mtp steps 6 qwen"})
	other := mustCreate(t, s1, Job{Command: "svc restart qwen"})
	if ids, err := s1.CancelRequests(ctx, "runner"); err != nil || len(ids) != 0 {
		t.Fatalf("CancelRequests before any = %v, %v", ids, err)
	}
	for range 2 { // asking twice is asking once
		if err := s2.RequestCancel(ctx, j.ID, "console:ops"); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := s1.CancelRequests(ctx, "runner"); err != nil || len(ids) != 1 || ids[0] != j.ID {
		t.Fatalf("CancelRequests = %v, %v; want [%d]", ids, err, j.ID)
	}
	if ids, _ := s1.CancelRequests(ctx, "someone-else"); len(ids) != 0 {
		t.Fatalf("another owner sees %v", ids)
	}
	if err := s1.FinishJob(ctx, j.ID, Cancelled, "cancelled", nil); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s1.CancelRequests(ctx, "runner"); len(ids) != 0 {
		t.Fatalf("a finished job still asked to cancel: %v (job %d untouched)", ids, other.ID)
	}
	if err := s2.RequestCancel(ctx, 9999, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancel of a missing job = %v, want ErrNotFound", err)
	}
}

func TestCancelRequests(t *testing.T) { t.Parallel(); eachDriver(t, testCancelRequests) }

// BenchmarkLeaseAcquireRelease measures one acquire and one release of a
// free lease (two write transactions), the cost a mutating job pays per
// lock.
func BenchmarkLeaseAcquireRelease(b *testing.B) {
	ctx := context.Background()
	s := openTemp(b)
	if _, err := s.RegisterOwner(ctx, Owner{ID: "bench"}, time.Minute); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		a, err := s.AcquireLease(ctx, "service:qwen", "bench", int64(i), time.Minute)
		if err != nil || !a.Acquired {
			b.Fatal(a, err)
		}
		if err := s.ReleaseLease(ctx, "service:qwen", "bench", int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeat measures one heartbeat of an owner holding two leases.
func BenchmarkHeartbeat(b *testing.B) {
	ctx := context.Background()
	s := openTemp(b)
	if _, err := s.RegisterOwner(ctx, Owner{ID: "bench"}, time.Minute); err != nil {
		b.Fatal(err)
	}
	for _, k := range []string{"service:qwen", "node:pve"} {
		if _, err := s.AcquireLease(ctx, k, "bench", 1, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if keys, err := s.Heartbeat(ctx, "bench", time.Minute); err != nil || len(keys) != 2 {
			b.Fatal(keys, err)
		}
	}
}

// Owners dead for long, with no unfinished job, are removed with their
// leases; live ones and dead ones with unfinished jobs stay.
func testPruneOwners(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	register(t, s, "live", time.Minute)
	register(t, s, "dead-idle", time.Minute)
	register(t, s, "dead-busy", time.Minute)
	if _, err := s.AcquireLease(ctx, "node:pve", "dead-idle", 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	busy, err := s.CreateJob(ctx, Job{Command: "mtp steps 6 qwen", Owner: "dead-busy"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"dead-idle", "dead-busy"} {
		if ok, err := s.ExpireOwner(ctx, id, 100, "m1"); err != nil || !ok {
			t.Fatalf("ExpireOwner(%s) = %v, %v", id, ok, err)
		}
	}
	if n, err := s.PruneOwners(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("prune of owners dead for less than an hour = %d, %v", n, err)
	}
	n, err := s.PruneOwners(ctx, time.Now().Add(time.Second))
	if err != nil || n != 1 {
		t.Fatalf("PruneOwners = %d, %v; want 1", n, err)
	}
	owners, _ := s.Owners(ctx)
	if len(owners) != 2 || owners[0].ID != "live" || owners[1].ID != "dead-busy" {
		t.Fatalf("owners after prune = %+v", owners)
	}
	if ls, _ := s.Leases(ctx); len(ls) != 0 {
		t.Fatalf("leases of a pruned owner remain: %+v", ls)
	}
	if _, err := s.InterruptUnfinished(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Job(ctx, busy.ID); j.Status != Interrupted {
		t.Fatalf("dead owner's job = %s", j.Status)
	}
	if n, _ := s.PruneOwners(ctx, time.Now().Add(time.Second)); n != 1 {
		t.Fatalf("after its job was interrupted, the dead owner was not pruned (%d)", n)
	}
}

func TestPruneOwners(t *testing.T) { t.Parallel(); eachDriver(t, testPruneOwners) }
