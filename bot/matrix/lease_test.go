package matrix

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/store"
)

// TestSyncLeaseTakeover: a holder that dies without giving the sync lease
// up (it stops renewing) loses it to a standby once it expires, and learns
// at its next renewal that it no longer holds it; the standby was told who
// held it meanwhile.
func TestSyncLeaseTakeover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const ttl = 500 * time.Millisecond
	dead, err := newSyncLease(ctx, st, "@opsbot:example.org", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	standby, err := newSyncLease(ctx, st, "@opsbot:example.org", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.close()
	var told atomic.Value
	began := time.Now()
	if err := standby.acquire(ctx, func(h string) { told.Store(h) }); err != nil {
		t.Fatal(err)
	}
	if h, _ := told.Load().(string); !strings.Contains(h, "opsbot on ") {
		t.Errorf("the standby was told %q about the holder", h)
	}
	if waited := time.Since(began); waited < ttl/2 {
		t.Errorf("taken over after %s: before the holder's lease (%s) expired", waited, ttl)
	}
	held, err := dead.renew(ctx)
	if err != nil || held {
		t.Errorf("the old holder's renewal: held %v, err %v; want it lost", held, err)
	}
}
