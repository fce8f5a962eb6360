package leases

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/store"
)

// TestHoldLostAfterAPause: a process whose leases were last renewed longer
// ago than the TTL less the margin (it was paused) no longer holds its
// jobs, whatever its heartbeat will find.
func TestHoldLostAfterAPause(t *testing.T) {
	t.Parallel()
	_, l := newTestLeases(t)
	if err := l.Check(1); err != nil {
		t.Fatalf("just renewed: %v", err)
	}
	l.mu.Lock()
	l.lastRenew = time.Now().Add(-3 * time.Second) // as after a SIGSTOP of 3 s
	l.mu.Unlock()
	if err := l.Check(1); err == nil || !strings.Contains(err.Error(), "last renewed") {
		t.Fatalf("after a pause: %v; want the hold lost", err)
	}
}

// TestWaitingAcquireWakesAtTheHoldersExpiry: a waiting Acquire tries again
// at the holder's expiry (by the store's clock) when that comes before its
// next poll, and at the poll otherwise, so a dead holder's lease is taken
// as soon as it expires.
func TestWaitingAcquireWakesAtTheHoldersExpiry(t *testing.T) {
	t.Parallel()
	st, l := newTestLeases(t)
	now := st.Clock()()
	for _, tc := range []struct {
		name     string
		expires  time.Time
		min, max time.Duration
	}{
		{"expires within the poll", now.Add(50 * time.Millisecond), time.Millisecond, 51 * time.Millisecond},
		{"expires after the poll", now.Add(10 * time.Second), l.poll, l.poll},
		{"expired already", now.Add(-time.Second), l.poll, l.poll},
		{"no expiry known", time.Time{}, l.poll, l.poll},
	} {
		if got := l.retryIn(store.Lease{ExpiresAt: tc.expires}); got < tc.min || got > tc.max {
			t.Errorf("%s: retry in %s, want %s..%s", tc.name, got, tc.min, tc.max)
		}
	}
}

// TestLeasesCloseEndsLeaderHolds: when the runtime's locker closes (the
// bot stops), a leader's hold still held (a Matrix sync's) is marked lost
// with ErrClosed, not a takeover; its release is a no-op, the lease
// went with the owner; and Lock refuses from then on.
func TestLeasesCloseEndsLeaderHolds(t *testing.T) {
	t.Parallel()
	st, l := newTestLeases(t)
	ctx := context.Background()
	h, err := l.Lock(ctx, "matrix-sync:@opsbot:example.org", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	select {
	case <-h.Lost():
	default:
		t.Fatal("the leader's hold is not marked lost")
	}
	if err := h.Check(); !errors.Is(err, ErrClosed) || !errors.Is(err, remote.ErrHoldLost) {
		t.Errorf("the hold's check: %v, want ErrClosed", err)
	}
	h.Release()
	if ls, err := st.Leases(ctx); err != nil || len(ls) != 0 {
		t.Errorf("leases after close: %+v %v", ls, err)
	}
	if _, err := l.Lock(ctx, "matrix-sync:@opsbot:example.org", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Lock after close: %v, want ErrClosed", err)
	}
}

// newTestLeases opens a store of t's own and a lease owner on it (TTL 3 s,
// no heartbeat running), closed when t ends.
func newTestLeases(t *testing.T) (*store.Store, *Leases) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := New(ctx, st, Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return st, l
}

// TestRetriedReleaseSparesTheLeaseTakenAgain: a release that failed while
// the store was away is retried by the heartbeat; when this process has
// taken the same lease again meanwhile (a leader: same owner, key and job
// 0), the retry is moot and must not end the new acquisition, whether the
// retry was pending when the lease was taken again or had already been
// picked up by a heartbeat under way. The failed release is put in by hand:
// SQLite cannot refuse one write and take the next.
func TestRetriedReleaseSparesTheLeaseTakenAgain(t *testing.T) {
	t.Parallel()
	st, l := newTestLeases(t)
	ctx := context.Background()
	const key = "scheduler"
	held := func() error {
		ls, err := st.Leases(ctx)
		if err != nil {
			return err
		}
		for _, x := range ls {
			if x.Key == key && x.Owner == l.Owner().ID {
				if !l.Holds(key) {
					return errors.New("the store says held, Holds says not")
				}
				return nil
			}
		}
		return errors.New("not held in the store")
	}
	for _, pickedUp := range []bool{false, true} {
		release, _, err := l.Acquire(ctx, key, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		release()
		failed := heldKey{key, 0} // as release leaves it when the store refuses the delete
		if !pickedUp {
			l.mu.Lock()
			l.unreleased = append(l.unreleased, failed)
			l.mu.Unlock()
		}
		again, _, err := l.Acquire(ctx, key, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if pickedUp {
			l.retryRelease(ctx, failed) // the heartbeat had read the retries before the lease was taken again
		}
		if !l.renew(ctx) {
			t.Fatal("the heartbeat failed")
		}
		if err := held(); err != nil {
			t.Fatalf("retry picked up before the lease was taken again: %t: %v", pickedUp, err)
		}
		again()
	}
}

// TestLockWaitsForTheHeartbeatAfterAStall: a process whose leases were last
// renewed longer ago than the TTL less the margin (the store was away, or
// the process was paused) takes a new lease only once its heartbeat renewed
// it, so the new hold is good from the start instead of failing its first
// check (and the store does not see a lease of an expired owner).
func TestLockWaitsForTheHeartbeatAfterAStall(t *testing.T) {
	t.Parallel()
	_, l := newTestLeases(t)
	l.Start(nil, nil)
	l.mu.Lock()
	l.lastRenew = time.Now().Add(-l.ttl) // as after the store was away for the TTL
	l.mu.Unlock()
	h, err := l.Lock(context.Background(), "watchdog", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if err := h.Check(); err != nil {
		t.Fatalf("a hold taken after a stall: %v; want it good at once", err)
	}
}
