package matrix

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/store"
)

// syncLease is the store lease that lets one opsbot process sync an account
// while others on the same store stand by. The process registers an owner
// of its own in the store (the heartbeat below keeps it live); a process
// that dies stops renewing, and a standby takes the lease over once it
// expires (at once, when the standby's bot sees the dead pid on the same
// machine).
type syncLease struct {
	st    *store.Store
	key   string
	owner store.Owner
	ttl   time.Duration
}

func newSyncLease(ctx context.Context, st *store.Store, user string, ttl time.Duration) (*syncLease, error) {
	host, _ := os.Hostname()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	o := store.Owner{ID: fmt.Sprintf("%s:%d:%s:matrix", host, os.Getpid(), hex.EncodeToString(rnd[:])),
		Host: host, PID: os.Getpid(), Machine: bot.MachineID()}
	o, err := st.RegisterOwner(ctx, o, ttl)
	if err != nil {
		return nil, fmt.Errorf("register the matrix sync of this opsbot process in the store: %w", err)
	}
	return &syncLease{st: st, key: "matrix-sync:" + user, owner: o, ttl: ttl}, nil
}

// acquire blocks until this process holds the lease or ctx ends. It calls
// waiting with who holds it whenever that changes.
func (l *syncLease) acquire(ctx context.Context, waiting func(holder string)) error {
	told := ""
	tick := time.NewTicker(min(time.Second, l.ttl/3))
	defer tick.Stop()
	for {
		// Keep our owner live while we wait, so that a takeover sees a live
		// standby and not an expired one.
		if _, err := l.st.Heartbeat(ctx, l.owner.ID, l.ttl); errors.Is(err, store.ErrNotFound) {
			if _, err := l.st.RegisterOwner(ctx, l.owner, l.ttl); err != nil && ctx.Err() == nil {
				return err
			}
		}
		a, err := l.st.AcquireLease(ctx, l.key, l.owner.ID, 0, l.ttl)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("acquire the matrix sync lease %s: %w", l.key, err)
		}
		if a.Acquired {
			return nil
		}
		if h := a.Holder.Holder(); a.Holder.Owner != "" && h != told && waiting != nil {
			told = h
			waiting(h)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// renew heartbeats and reports whether the lease is still held here.
func (l *syncLease) renew(ctx context.Context) (bool, error) {
	keys, err := l.st.Heartbeat(ctx, l.owner.ID, l.ttl)
	if err != nil {
		return false, err
	}
	return slices.Contains(keys, l.key), nil
}

// close gives the lease up and unregisters the owner.
func (l *syncLease) close() {
	ctx, cancel := context.WithTimeout(context.Background(), store.BusyTimeout)
	defer cancel()
	_ = l.st.UnregisterOwner(ctx, l.owner.ID)
}
