// Package leases holds things across opsbot processes on one store: the
// runtime's locker (Leases: a service or node held as a store lease with an
// owner and a heartbeat, taken over once its holder died or stopped
// renewing, and found lost when this process stalled past the expiry) and
// the leader loop of the scheduler and the watchdog (RunLeader). The job
// engine (package jobs) starts and closes the heartbeat and hears of lost
// leases; the pipeline and the adapters hold keys through ops.Locker.
package leases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/store"
)

// Leases holds services and nodes for this process's jobs as leases in the
// store, so that they hold across every opsbot process on the same store.
// The process registers as an owner (hostname:pid:random) and a heartbeat
// goroutine renews the owner and its leases every TTL/3 (every second after
// a failed renewal, until one succeeds); a process that dies stops
// renewing, and its leases are taken over once they expire (at once, when a
// process on the same machine sees its pid gone).
//
// A lease lost while held (this process stalled past the expiry and
// another took it over, or the store was away for longer than the TTL) is
// noticed at the next heartbeat and reported to the engine, which stops the
// job that held it, and to the hold, whose leader lets it go (RunLeader). Leases is safe for concurrent
// use; it implements ops.Locker, holding each key for the job the engine
// or the pipeline names (JobHold.JobID).
type Leases struct {
	st    *store.Store
	owner store.Owner
	ttl   time.Duration
	poll  time.Duration // how often a waiting acquire tries again
	log   *slog.Logger

	mu        sync.Mutex
	held      map[string]heldLease
	seq       uint64        // counts acquisitions; see renew
	changed   chan struct{} // closed (and replaced) when this process releases a lease
	lastRenew time.Time

	unreleased []heldKey      // releases that failed, retried by renew
	lostJobs   map[int64]bool // jobs one of whose leases was found lost

	isClosed bool // close began: nothing more is acquired, released or renewed

	// relMu orders a retried release against an acquisition of the same
	// key: the release of an earlier acquisition never ends a later one.
	relMu sync.Mutex

	onLost func(key string, jobID int64, err error)
	onTick func(ctx context.Context, renewed bool)
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

// ErrClosed is why a hold of the runtime's locker ended when the
// locker closed (this process stops: App.Shutdown, App.Close), and what
// Lock returns after that. It is no takeover: a long holder (a Matrix sync)
// that sees it simply stops.
var ErrClosed = errors.New("the runtime's locker closed: this opsbot process stops")

type heldKey struct {
	key   string
	jobID int64
}

type heldLease struct {
	jobID int64
	seq   uint64
	hold  *ops.Hold // set by Lock; nil for Acquire's own callers
}

var _ ops.Locker = (*Leases)(nil)

// Hold is a key held by the runtime's locker (ops.Hold), for the adapters,
// which import bot only: a Matrix sync holds its account with it, through
// App.Leases (cmd hands it to the adapter).
type Hold = ops.Hold

// Options configure Leases.
type Options struct {
	TTL    time.Duration // config.DefaultLeaseTTL when zero
	Logger *slog.Logger
}

// New registers this process as an owner in st. Start the heartbeat with
// Start (the job engine's NewEngine does) and stop it with Close (the
// engine's Close does).
func New(ctx context.Context, st *store.Store, o Options) (*Leases, error) {
	if o.TTL <= 0 {
		o.TTL = config.DefaultLeaseTTL
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	host, _ := os.Hostname()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	owner := store.Owner{ID: fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(rnd[:])),
		Host: host, PID: os.Getpid(), Machine: machineID(host)}
	owner, err := st.RegisterOwner(ctx, owner, o.TTL)
	if err != nil {
		return nil, fmt.Errorf("register this opsbot process in the store: %w", err)
	}
	return &Leases{st: st, owner: owner, ttl: o.TTL, poll: min(200*time.Millisecond, o.TTL/10), log: log,
		held: map[string]heldLease{}, lostJobs: map[int64]bool{}, changed: make(chan struct{}), lastRenew: time.Now()}, nil
}

// Owner is this process as the store knows it.
func (l *Leases) Owner() store.Owner { return l.owner }

// TTL is how long a lease outlives the last heartbeat.
func (l *Leases) TTL() time.Duration { return l.ttl }

// Start runs the heartbeat goroutine, once per Leases: it renews this
// owner and its leases every TTL/3 (every second after a failed renewal)
// and marks lost holds. About every second it calls onTick (renewed says
// whether this tick renewed the leases; ctx ends with Close), and for each
// lease found lost it calls onLost with the key, the job that held it (0:
// a leader) and an error that wraps remote.ErrHoldLost and
// store.ErrLeaseLost. Both run on the heartbeat goroutine and may be nil (a
// Leases used without a job engine: tests of leaders). Stop it with Close.
func (l *Leases) Start(onLost func(key string, jobID int64, err error), onTick func(ctx context.Context, renewed bool)) {
	l.mu.Lock()
	l.onLost, l.onTick = onLost, onTick
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	l.mu.Unlock()
	go l.loop()
}

func (l *Leases) loop() {
	defer close(l.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	renewEvery := l.ttl / 3
	tick := time.NewTicker(min(time.Second, renewEvery))
	defer tick.Stop()
	lastTry, ok := time.Now(), true
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		renewed := false
		// After a failed renewal (the store was away) the next try is at
		// the next tick, so that the leases count again within a second
		// of the store's return.
		if !ok || time.Since(lastTry) >= renewEvery-renewEvery/10 {
			lastTry = time.Now()
			renewed = l.renew(ctx)
			ok = renewed
		}
		if l.onTick != nil {
			l.onTick(ctx, renewed)
		}
	}
}

// renew heartbeats and reports every lease that is held here but was not
// renewed. Leases acquired after the heartbeat began are not judged by it.
func (l *Leases) renew(ctx context.Context) bool {
	l.mu.Lock()
	seq := l.seq
	retry := l.unreleased
	l.unreleased = nil
	l.mu.Unlock()
	for _, k := range retry {
		l.retryRelease(ctx, k)
	}
	began := time.Now()
	keys, err := l.st.Heartbeat(ctx, l.owner.ID, l.ttl)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		l.mu.Lock()
		since := time.Since(l.lastRenew)
		l.mu.Unlock()
		l.log.Error("lease heartbeat failed", "owner", l.owner.ID, "since_last_renewal", since.Round(time.Millisecond), "err", err)
		if since <= l.ttl && !errors.Is(err, store.ErrNotFound) {
			return false
		}
		// Past the expiry (or unregistered): another process may own our
		// leases by now. Stop every job that holds one, and register again
		// so that new jobs hold what they take.
		keys = nil
		if errors.Is(err, store.ErrNotFound) {
			if _, rerr := l.st.RegisterOwner(ctx, l.owner, l.ttl); rerr != nil {
				l.log.Error("register this opsbot process again", "owner", l.owner.ID, "err", rerr)
			}
		}
	} else {
		l.mu.Lock()
		l.lastRenew = began
		l.mu.Unlock()
	}
	got := make(map[string]bool, len(keys))
	for _, k := range keys {
		got[k] = true
	}
	type lost struct {
		key string
		h   heldLease
	}
	var gone []lost
	l.mu.Lock()
	for k, h := range l.held {
		if h.seq <= seq && !got[k] {
			gone = append(gone, lost{k, h})
			delete(l.held, k)
			l.lostJobs[h.jobID] = true
		}
	}
	l.mu.Unlock()
	for _, g := range gone {
		l.log.Error("lease lost: it expired and another opsbot process may have taken it over",
			"lease", g.key, "job", g.h.jobID, "owner", l.owner.ID)
		lostErr := fmt.Errorf("%w: %w: %s expired and another opsbot process may have taken it over", remote.ErrHoldLost, store.ErrLeaseLost, g.key)
		if g.h.hold != nil {
			g.h.hold.MarkLost(lostErr)
		}
		if l.onLost != nil {
			l.onLost(g.key, g.h.jobID, lostErr)
		}
	}
	return err == nil
}

// retryRelease gives up k again, a lease whose release failed (the store
// was away), unless it was taken again since: then the release is moot,
// and it would end the new acquisition (the same owner, key and job).
// While an acquisition is under way it waits for the next heartbeat rather
// than hold this one up.
func (l *Leases) retryRelease(ctx context.Context, k heldKey) {
	if !l.relMu.TryLock() {
		l.mu.Lock()
		l.unreleased = append(l.unreleased, k)
		l.mu.Unlock()
		return
	}
	defer l.relMu.Unlock()
	l.mu.Lock()
	h, again := l.held[k.key]
	l.mu.Unlock()
	if again && h.jobID == k.jobID {
		return
	}
	if err := l.st.ReleaseLease(ctx, k.key, l.owner.ID, k.jobID); err != nil && !errors.Is(err, store.ErrLeaseLost) {
		l.log.Error("release lease", "lease", k.key, "job", k.jobID, "err", err)
		l.mu.Lock()
		l.unreleased = append(l.unreleased, k)
		l.mu.Unlock()
	}
}

// holdMargin is how long before its expiry a lease counts as lost here: the
// time a host command may take to reach the host after the check.
func (l *Leases) holdMargin() time.Duration { return max(l.ttl/10, 100*time.Millisecond) }

// Check returns nil while this process may still act for job: none of the
// job's leases was found lost, and the leases were renewed less than the
// TTL minus a margin ago (by the monotonic clock, so a process resumed after
// a pause sees the time it was stopped). Otherwise the error wraps
// remote.ErrHoldLost. The runtime calls it right before each host command.
func (l *Leases) Check(jobID int64) error {
	l.mu.Lock()
	lost := l.lostJobs[jobID]
	l.mu.Unlock()
	if lost {
		return fmt.Errorf("%w: a lease of job #%d expired and another opsbot process may have taken it over", remote.ErrHoldLost, jobID)
	}
	return l.fresh()
}

// fresh returns nil while this process's leases were renewed less than the
// TTL less a margin ago.
func (l *Leases) fresh() error {
	l.mu.Lock()
	since := time.Since(l.lastRenew)
	l.mu.Unlock()
	if limit := l.ttl - l.holdMargin(); since > limit && l.st.WriteHealth() == nil {
		// (While the store refuses writes, no process on it can take a
		// lease over either: the hold stands until it takes writes again.)
		return fmt.Errorf("%w: its leases were last renewed %s ago, past lease_ttl %s less a margin of %s",
			remote.ErrHoldLost, since.Round(time.Millisecond), l.ttl, l.holdMargin())
	}
	return nil
}

// ForgetJob drops what Check remembers of job: call it once the job ended
// (and released its leases), so that the record of a lost lease does not
// outlive it.
func (l *Leases) ForgetJob(jobID int64) {
	l.mu.Lock()
	delete(l.lostJobs, jobID)
	l.mu.Unlock()
}

// Close stops the heartbeat (when started) and unregisters this process,
// releasing every lease it still holds. Call it after the jobs have ended;
// it is safe to call more than once. The holds of leaders still held (a
// Matrix sync's) are marked lost with ErrClosed first, so that they stop;
// Lock and Acquire fail with ErrClosed from then on, and a release is a
// no-op (the leases went with the owner).
func (l *Leases) Close() {
	l.closed.Do(func() {
		l.mu.Lock()
		l.isClosed = true
		var leaders []*ops.Hold
		for _, h := range l.held {
			if h.jobID == 0 && h.hold != nil {
				leaders = append(leaders, h.hold)
			}
		}
		l.mu.Unlock()
		for _, h := range leaders {
			h.MarkLost(fmt.Errorf("%w: %w", remote.ErrHoldLost, ErrClosed))
		}
		if l.stop != nil {
			close(l.stop)
			<-l.done
		}
		ctx, cancel := context.WithTimeout(context.Background(), store.BusyTimeout)
		defer cancel()
		if err := l.st.UnregisterOwner(ctx, l.owner.ID); err != nil {
			l.log.Warn("unregister this opsbot process", "owner", l.owner.ID, "err", err)
		}
	})
}

// Acquire holds key for job: it blocks until the lease is this job's or ctx
// ends (then it returns ctx's cause and holds nothing). While it waits it
// calls waiting once with who holds the lease. The Acquisition says whether
// the lease was taken over from a dead or expired holder. release gives the
// lease up; it is safe to call more than once, and a lease that was lost
// meanwhile is only logged.
func (l *Leases) Acquire(ctx context.Context, key string, jobID int64, waiting func(holder string)) (release func(), _ store.Acquisition, _ error) {
	told := false
	for {
		l.mu.Lock()
		changed, closed := l.changed, l.isClosed
		l.mu.Unlock()
		if closed {
			return nil, store.Acquisition{}, ErrClosed
		}
		if err := l.awaitRenewal(ctx); err != nil {
			return nil, store.Acquisition{}, err
		}
		a, err := l.take(ctx, key, jobID)
		if err != nil {
			l.mu.Lock()
			closed := l.isClosed
			l.mu.Unlock()
			switch {
			case ctx.Err() != nil:
				return nil, store.Acquisition{}, context.Cause(ctx)
			case closed: // the store closes with the locker
				return nil, store.Acquisition{}, ErrClosed
			}
			return nil, store.Acquisition{}, err
		}
		if a.Acquired {
			if a.TookOver() {
				l.log.Warn("lease taken over from a holder that stopped renewing it", "lease", key, "job", jobID,
					"from", a.Holder.Holder(), "from_owner", a.Holder.Owner)
			}
			var once sync.Once
			return func() { once.Do(func() { l.release(key, jobID) }) }, a, nil
		}
		if !told && waiting != nil {
			told = true
			waiting(l.describe(a.Holder))
		}
		t := time.NewTimer(l.retryIn(a.Holder))
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil, store.Acquisition{}, context.Cause(ctx)
		}
	}
}

// take tries to acquire key for job once and, when it did, counts it held,
// in one step as retryRelease sees it (see relMu).
func (l *Leases) take(ctx context.Context, key string, jobID int64) (store.Acquisition, error) {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	a, err := l.st.AcquireLease(ctx, key, l.owner.ID, jobID, l.ttl)
	if err != nil || !a.Acquired {
		return a, err
	}
	l.mu.Lock()
	l.seq++
	l.held[key] = heldLease{jobID: jobID, seq: l.seq}
	l.mu.Unlock()
	return a, nil
}

// awaitRenewal waits, before a lease is taken, while this process's own
// leases count as stale (fresh fails: not renewed for the TTL less a
// margin, and the store takes writes): its registration in the store may
// have expired, so that a lease taken now would be anyone's to take over,
// and its hold would fail its first check. The heartbeat, which tries
// again every second after a failure, ends the wait; so do ctx and close.
// Without a heartbeat running (a Leases not started) it does not wait.
func (l *Leases) awaitRenewal(ctx context.Context) error {
	for {
		l.mu.Lock()
		running, closed := l.stop != nil, l.isClosed
		l.mu.Unlock()
		if !running || l.fresh() == nil {
			return nil
		}
		if closed {
			return ErrClosed
		}
		t := time.NewTimer(l.poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
}

// retryIn is how long a waiting Acquire waits before it tries again: the
// poll interval, or less when the holder's lease expires sooner (judged by
// the store's clock), so that a dead holder's lease is taken within a
// millisecond or so of its expiry rather than up to a poll later.
func (l *Leases) retryIn(holder store.Lease) time.Duration {
	wait := l.poll
	if !holder.ExpiresAt.IsZero() {
		if d := holder.ExpiresAt.Sub(l.st.Clock()()) + time.Millisecond; d > 0 && d < wait {
			wait = d
		}
	}
	return wait
}

func (l *Leases) release(key string, jobID int64) {
	l.mu.Lock()
	h, ok := l.held[key]
	if ok && h.jobID == jobID {
		delete(l.held, key)
	}
	closed := l.isClosed
	l.mu.Unlock()
	if closed {
		return // unregistering the owner released it
	}
	ctx, cancel := context.WithTimeout(context.Background(), store.BusyTimeout)
	defer cancel()
	err := l.st.ReleaseLease(ctx, key, l.owner.ID, jobID)
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		l.log.Warn("release lease: it had already been taken over", "lease", key, "job", jobID)
	case err != nil:
		// The heartbeat renews every lease of this owner: retry the
		// release there rather than hold the service until exit.
		l.log.Error("release lease (retried at the next heartbeat)", "lease", key, "job", jobID, "err", err)
		l.mu.Lock()
		l.unreleased = append(l.unreleased, heldKey{key, jobID})
		l.mu.Unlock()
	}
	l.mu.Lock()
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// describe says who holds a lease, for a person.
func (l *Leases) describe(h store.Lease) string {
	if h.Owner == l.owner.ID {
		if h.JobID != 0 {
			return fmt.Sprintf("job #%d of this opsbot process", h.JobID)
		}
		return "this opsbot process"
	}
	return h.Holder()
}

// Lock holds the store lease key for this process itself, for no job: a
// leader's (the scheduler, the watchdog, a Matrix sync). See LockFor.
func (l *Leases) Lock(ctx context.Context, key string, onWait func(holder string)) (*ops.Hold, error) {
	return l.LockFor(ctx, key, 0, onWait)
}

// LockFor implements ops.Locker with the store lease key, held by job jobID
// (0: none, a leader). The hold carries the lease's epoch; it is marked
// lost when the heartbeat finds the lease taken over, and its Check fails
// once the leases were not renewed for the TTL less a margin.
func (l *Leases) LockFor(ctx context.Context, key string, jobID int64, onWait func(holder string)) (*ops.Hold, error) {
	release, a, err := l.Acquire(ctx, key, jobID, onWait)
	if err != nil {
		return nil, err
	}
	h := ops.NewHold(key, a.Epoch, l.fresh, release)
	if a.TookOver() {
		h.TookOverFrom = a.Holder.Holder()
	}
	l.mu.Lock()
	switch hl, ok := l.held[key]; {
	case l.isClosed:
		h.MarkLost(fmt.Errorf("%w: %w", remote.ErrHoldLost, ErrClosed))
	case ok && hl.jobID == jobID:
		hl.hold = h
		l.held[key] = hl
	default:
		h.MarkLost(fmt.Errorf("%w: %s was lost as it was taken", remote.ErrHoldLost, key))
	}
	l.mu.Unlock()
	return h, nil
}

// Holds reports whether this process holds the leader lease key (one taken
// without a job: the scheduler's, the watchdog's) now: taken, and not
// found lost since.
func (l *Leases) Holds(key string) bool {
	l.mu.Lock()
	h, ok := l.held[key]
	l.mu.Unlock()
	// (Check takes l.mu itself: outside the lock.)
	return ok && h.jobID == 0 && (h.hold == nil || h.hold.Check() == nil)
}

// ReapDead ends at once the owners on this machine (same host, boot and
// PID namespace) whose process is gone, so their leases and jobs need not
// wait for the expiry. It only logs what fails; without a machine id it
// does nothing (then only the expiry frees a dead holder's leases).
func (l *Leases) ReapDead(ctx context.Context) {
	if l.owner.Machine == "" {
		return
	}
	owners, err := l.st.Owners(ctx)
	if err != nil {
		l.log.Warn("look for stopped opsbot processes", "err", err)
		return
	}
	now := l.st.Clock()() // owners' expiries are by the store's clock
	for _, o := range owners {
		if o.ID == l.owner.ID || o.Machine != l.owner.Machine || !o.ExpiresAt.After(now) || o.PID <= 0 || pidAlive(o.PID) {
			continue
		}
		if ok, err := l.st.ExpireOwner(ctx, o.ID, o.PID, o.Machine); err != nil {
			l.log.Warn("expire a stopped opsbot process", "owner", o.ID, "err", err)
		} else if ok {
			l.log.Warn("an opsbot process on this machine stopped without releasing its leases; they are free now",
				"owner", o.ID, "pid", o.PID)
		}
	}
}

// machineID names this machine and PID namespace, so that a pid is only
// checked where it means the same process: hostname, boot id and the PID
// namespace. "" when any part is unknown (then only expiry frees leases):
// so it is under the unit's ProcSubset=pid, which hides the boot id, and
// two processes on two machines sharing a PostgreSQL store never take each
// other's pids for their own.
func machineID(host string) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil || host == "" {
		return ""
	}
	return host + "/" + strings.TrimSpace(string(boot)) + "/" + ns
}
