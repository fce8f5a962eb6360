package matrix

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/store"
)

// TestSyncLeaseTakeover: the sync is held with the runtime's locker. A
// holder that dies without giving the sync lease up (it stops renewing)
// loses it to a standby once it expires, with a newer epoch; the old
// holder's hold no longer checks; the standby was told who held it
// meanwhile.
func TestSyncLeaseTakeover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const ttl = 500 * time.Millisecond
	const key = "matrix-sync:@opsbot:example.org"
	dead, err := leases.New(ctx, st, leases.Options{TTL: ttl}) // never started: it renews nothing
	if err != nil {
		t.Fatal(err)
	}
	old, err := dead.Lock(ctx, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	standby, err := leases.New(ctx, st, leases.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	standby.Start(nil, nil)
	defer standby.Close()
	var told atomic.Value
	began := time.Now()
	taken, err := standby.Lock(ctx, key, func(h string) { told.Store(h) })
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Release()
	if h, _ := told.Load().(string); !strings.Contains(h, "opsbot on ") {
		t.Errorf("the standby was told %q about the holder", h)
	}
	if waited := time.Since(began); waited < ttl/2 {
		t.Errorf("taken over after %s: before the holder's lease (%s) expired", waited, ttl)
	}
	if taken.Epoch <= old.Epoch || taken.TookOverFrom == "" {
		t.Errorf("epochs %d -> %d, took over from %q: want a newer epoch, from the old holder", old.Epoch, taken.Epoch, taken.TookOverFrom)
	}
	if err := old.Check(); err == nil || !strings.Contains(err.Error(), "last renewed") {
		t.Errorf("the old holder's check: %v; want it lost", err)
	}
	if err := taken.Check(); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("the new holder's check: %v", err)
	}
}
