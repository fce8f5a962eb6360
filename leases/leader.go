package leases

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ErrLost stops a scheduler or watchdog that no longer holds its lease.
var ErrLost = errors.New("lease lost")

// RunLeader holds lease key with leases (the runtime's locker) while body runs;
// body's held checks the hold before each action, as the runtime checks a
// job's before each host command: not found lost by the heartbeat (which
// renews the lease in the store and learns there whether it is still ours),
// and renewed less than the TTL less a margin ago. When the lease is lost
// body's error is ErrLost, and RunLeader waits for the lease again;
// other errors are logged, and body is started again after a pause.
//
// Once the heartbeat finds the lease lost (it was not renewed for the TTL:
// the store was away, or this process stalled), body's ctx ends at once,
// whether or not body acts, and RunLeader lets the lease go and waits to
// take it again: a leader with nothing to do (no schedule due, the next
// watchdog pass a minute away) holds its lease again as soon as the store
// takes writes again.
func RunLeader(ctx context.Context, leases *Leases, key string, log *slog.Logger,
	body func(ctx context.Context, held func(context.Context) error) error) error {
	for ctx.Err() == nil {
		hold, err := leases.Lock(ctx, key, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error("acquire lease", "lease", key, "err", err)
			if SleepOrDone(ctx, time.Second) {
				return nil
			}
			continue
		}
		log.Info("this opsbot process now holds the lease", "lease", key, "epoch", hold.Epoch)
		err = lead(ctx, hold, body)
		hold.Release()
		lost := isLost(hold)
		switch {
		case ctx.Err() != nil:
		case lost || errors.Is(err, ErrLost):
			log.Warn("lease lost: stopped acting; waiting to take it again", "lease", key)
		case err != nil:
			log.Error("leader stopped", "lease", key, "err", err)
			if SleepOrDone(ctx, time.Second) {
				return nil
			}
		}
	}
	return nil
}

// lead runs body under hold: its ctx ends once the hold is found lost.
func lead(ctx context.Context, hold *Hold, body func(ctx context.Context, held func(context.Context) error) error) error {
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-hold.Lost():
			cancel(fmt.Errorf("%w: %w", ErrLost, hold.Check()))
		case <-bctx.Done():
		}
	}()
	return body(bctx, func(context.Context) error {
		if err := hold.Check(); err != nil {
			return fmt.Errorf("%w: %w", ErrLost, err)
		}
		return nil
	})
}

// isLost reports whether the heartbeat found hold lost.
func isLost(hold *Hold) bool {
	select {
	case <-hold.Lost():
		return true
	default:
		return false
	}
}

// SleepOrDone waits d, or until ctx ends: it reports whether ctx ended. It is
// the pause of the leaders (RunLeader and the loops they run).
func SleepOrDone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return false
	}
}
