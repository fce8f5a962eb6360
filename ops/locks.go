package ops

import (
	"context"
	"fmt"
	"sync"
)

// Locker is opsbot's one way to hold a key exclusively: a service
// ("service:qwen") for a job's whole run, a physical node ("node:pve") for a
// pipeline's mutating window (from the stop of a service through its start
// and readiness, so two services that share a node never clear or start at
// once), and the leaders' keys (the scheduler, the watchdog, a Matrix sync).
// ProcessLocker holds keys within one process; the bot's store leases hold
// them across every opsbot process on the store.
//
// LockFor holds key for job jobID (0: for no job) and blocks until key is
// held or ctx ends (then it returns ctx's cause and holds nothing). While it
// waits it calls onWait once with a description of the current holder
// ("job #12 on serve@host1"), if it knows one. Implementations must be safe
// for concurrent use.
type Locker interface {
	LockFor(ctx context.Context, key string, jobID int64, onWait func(holder string)) (*Hold, error)
}

// Hold is a key a Locker holds until Release.
type Hold struct {
	Key string
	// Epoch increases with every acquisition of Key across the processes
	// sharing it (a fencing token); 0 for a ProcessLocker's holds.
	Epoch int64
	// TookOverFrom names the holder this hold was taken over from because
	// it stopped renewing (a dead process); "" otherwise.
	TookOverFrom string

	check    func() error // nil: held until Release
	release  func()
	lost     chan struct{}
	lostOnce sync.Once
	relOnce  sync.Once
	lostErr  error
}

// NewHold returns a hold of key for a Locker: check, when set, says whether
// it still holds the key right now (a lease renewed recently enough);
// release gives it up.
func NewHold(key string, epoch int64, check func() error, release func()) *Hold {
	return &Hold{Key: key, Epoch: epoch, check: check, release: release, lost: make(chan struct{})}
}

// MarkLost is for the Locker: the key was taken over or expired while held.
func (h *Hold) MarkLost(err error) {
	h.lostOnce.Do(func() {
		h.lostErr = err
		close(h.lost)
	})
}

// Lost is closed once the Locker found the hold lost: long holders (a
// leader, a sync) stop on it.
func (h *Hold) Lost() <-chan struct{} { return h.lost }

// Check returns nil while the key is still held here: not found lost, and
// the Locker's own check (for leases: renewed less than their TTL less a
// margin ago, by the monotonic clock) passes. The runtime calls it right
// before each host mutation.
func (h *Hold) Check() error {
	select {
	case <-h.lost:
		return h.lostErr
	default:
	}
	if h.check != nil {
		return h.check()
	}
	return nil
}

// Release gives the key up; it is safe to call more than once.
func (h *Hold) Release() {
	h.relOnce.Do(func() {
		if h.release != nil {
			h.release()
		}
	})
}

// ProcessLocker is a Locker that holds keys within this process only: the
// default of Config.NodeLocks, and the bot's when it has no store leases.
type ProcessLocker struct {
	mu    sync.Mutex
	locks map[string]chan struct{}
}

// NewProcessLocker returns an empty ProcessLocker.
func NewProcessLocker() *ProcessLocker {
	return &ProcessLocker{locks: map[string]chan struct{}{}}
}

// LockFor implements Locker within one process; which job holds a key
// changes nothing.
func (p *ProcessLocker) LockFor(ctx context.Context, key string, _ int64, onWait func(holder string)) (*Hold, error) {
	p.mu.Lock()
	l, ok := p.locks[key]
	if !ok {
		l = make(chan struct{}, 1)
		p.locks[key] = l
	}
	p.mu.Unlock()
	select {
	case l <- struct{}{}:
	default:
		if onWait != nil {
			onWait("another job of this opsbot process")
		}
		select {
		case l <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	return NewHold(key, 0, nil, func() { <-l }), nil
}

// holdNode holds t's physical node for r's job (see For) for a mutating
// window (stop through ready) and returns its unlock. It reports nothing
// when the node is free at once; when another job holds it, a "wait for
// node" step says who and how long the wait took. On ctx end it returns the
// step's error and holds nothing.
func (r *Runbook) holdNode(ctx context.Context, t *target, rep Reporter) (func(), error) {
	return r.holdKey(ctx, "node:"+t.nodeName, rep, "wait for node",
		fmt.Sprintf("waiting for node %s: %%s is changing a service on it", t.nodeName),
		fmt.Sprintf("hold node %s for %s", t.nodeName, t.name), fmt.Sprintf("node %s is ours", t.nodeName))
}

// holdKey holds key for r's job through Config.NodeLocks and returns its
// release. While another job holds it, a step named stepName says so once
// (waiting, with %s the holder) and ends with ours once it is held; an
// error says failed, then why.
func (r *Runbook) holdKey(ctx context.Context, key string, rep Reporter, stepName, waiting, failed, ours string) (func(), error) {
	var (
		mu sync.Mutex
		st *step
	)
	hold, err := r.cfg.NodeLocks.LockFor(ctx, key, r.hold.JobID, func(holder string) {
		mu.Lock()
		defer mu.Unlock()
		if st == nil {
			st = begin(rep, stepName, waiting, holder)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		err = fmt.Errorf("%s: %w", failed, err)
		if st != nil {
			return nil, st.fail(err)
		}
		return nil, err
	}
	if st != nil {
		st.done("%s", ours)
	}
	return hold.Release, nil
}
