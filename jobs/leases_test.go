package jobs

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
// with ErrLeasesClosed, not a takeover; its release is a no-op, the lease
// went with the owner; and Lock refuses from then on.
func TestLeasesCloseEndsLeaderHolds(t *testing.T) {
	t.Parallel()
	st, l := newTestLeases(t)
	ctx := context.Background()
	h, err := l.Lock(ctx, "matrix-sync:@opsbot:example.org", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.close()
	select {
	case <-h.Lost():
	default:
		t.Fatal("the leader's hold is not marked lost")
	}
	if err := h.Check(); !errors.Is(err, ErrLeasesClosed) || !errors.Is(err, remote.ErrHoldLost) {
		t.Errorf("the hold's check: %v, want ErrLeasesClosed", err)
	}
	h.Release()
	if ls, err := st.Leases(ctx); err != nil || len(ls) != 0 {
		t.Errorf("leases after close: %+v %v", ls, err)
	}
	if _, err := l.Lock(ctx, "matrix-sync:@opsbot:example.org", nil); !errors.Is(err, ErrLeasesClosed) {
		t.Errorf("Lock after close: %v, want ErrLeasesClosed", err)
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
	l, err := NewLeases(ctx, st, LeaseOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return st, l
}
