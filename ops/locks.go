package ops

import (
	"context"
	"fmt"
	"sync"
)

// NodeLocker holds a physical node (a Proxmox node, or a bare host itself)
// exclusively for the mutating window of a pipeline: from the stop of the
// service through its start and readiness (clear GPUs, write, start). Two
// services that share a node therefore never clear or start at the same time,
// while a long job on one (a sweep, a benchmark) does not block the other
// between its mutating windows.
//
// LockNode blocks until node is held or ctx ends (then it returns ctx's cause
// and holds nothing). While it waits it calls waiting once with a description
// of the current holder (for example "job #12 on serve@host1"), if it knows one.
// The returned unlock releases the node; it is safe to call more than once.
// Implementations must be safe for concurrent use.
type NodeLocker interface {
	LockNode(ctx context.Context, node string, waiting func(holder string)) (unlock func(), err error)
}

// processNodeLocks is the NodeLocker used when Config.NodeLocks is nil: it
// holds nodes within this process only.
type processNodeLocks struct {
	mu    sync.Mutex
	locks map[string]chan struct{}
}

func newProcessNodeLocks() *processNodeLocks {
	return &processNodeLocks{locks: map[string]chan struct{}{}}
}

// LockNode implements NodeLocker within one process.
func (p *processNodeLocks) LockNode(ctx context.Context, node string, waiting func(holder string)) (func(), error) {
	p.mu.Lock()
	l, ok := p.locks[node]
	if !ok {
		l = make(chan struct{}, 1)
		p.locks[node] = l
	}
	p.mu.Unlock()
	select {
	case l <- struct{}{}:
	default:
		if waiting != nil {
			waiting("another job of this opsbot process")
		}
		select {
		case l <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	var once sync.Once
	return func() { once.Do(func() { <-l }) }, nil
}

// holdNode holds t's physical node for a mutating window (stop through ready)
// and returns its unlock. It reports nothing when the node is free at once;
// when another job holds it, a "wait for node" step says who and how long the
// wait took. On ctx end it returns the step's error and holds nothing.
func (r *Runbook) holdNode(ctx context.Context, t *target, rep Reporter) (func(), error) {
	var (
		mu sync.Mutex
		st *step
	)
	unlock, err := r.cfg.NodeLocks.LockNode(ctx, t.nodeName, func(holder string) {
		mu.Lock()
		defer mu.Unlock()
		if st == nil {
			st = begin(rep, "wait for node", "waiting for node %s: %s is changing a service on it", t.nodeName, holder)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		err = fmt.Errorf("hold node %s for %s: %w", t.nodeName, t.name, err)
		if st != nil {
			return nil, st.fail(err)
		}
		return nil, err
	}
	if st != nil {
		st.done("node %s is ours", t.nodeName)
	}
	return unlock, nil
}
