// Package jobs is the job runtime: the Engine that runs each job the door
// (bot) submits (queue, per-service locks held as leases in the store
// across opsbot processes, cancel, timeouts, crash recovery), renders it as
// one live status message with a thread of steps (through chat, with
// report's rendering), records its events, result and benchmarks, and winds
// it down when the store refuses writes, keeping what the store refuses
// until it takes it (record.go). The runtime's locker (leases.Leases, package
// leases) holds this process's keys in the store; Runbooks is the Backend jobs run on (the runbook of the
// config in effect, swapped on reload); a job stops only at a safe point
// (never inside a unit write or a start), and an Observer is told of every
// job and step for metrics.
//
// It knows nothing of who may ask for a job or how a request came in:
// those are the door's (bot), which imports it, never the reverse.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsbot/opsbot/chat"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// Backend runs the pipeline of a job command under the job's hold (the zero
// ops.JobHold outside a job): on a Runbook bound to it (ops.Runbook.For),
// so that every host command and write checks it, the node locks are held
// for its job, and the pipeline winds down when it asks. It reports
// progress through rep and returns the result, or an error that says why
// the job could not finish (the result may be non-nil with an error: what
// was done before it failed). Run must honour ctx: on cancel or timeout it
// stops and leaves the host in a known state.
type Backend interface {
	Run(ctx context.Context, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error)
}

// EngineOptions configure a job Engine.
type EngineOptions struct {
	Store   *store.Store
	Backend Backend
	// Chats maps a platform name ("slack", "matrix", "console") to its adapter.
	// A job from a platform without a chat runs without a thread.
	Chats map[string]chat.Chat
	// JobTimeout bounds how long one job may run (not wait for its lock).
	JobTimeout time.Duration
	// Leases, when set, holds each mutating job's service as a lease in the
	// store, so the lock holds across opsbot processes on the same store;
	// the engine runs its heartbeat, and Close unregisters it. Without it,
	// services are held within this process only.
	Leases *leases.Leases
	Logger *slog.Logger
	// Observer, when set, is told of every job and step (metrics).
	Observer Observer
}

// Engine runs jobs: one mutating job per service at a time (across every
// opsbot process on the store, with Leases), read-only jobs at once; every
// job has a timeout and a cancel handle (also reachable from another process
// through the store), persists its events and final state, and renders its
// status thread. Safe for concurrent use.
type Engine struct {
	opts EngineOptions
	log  *slog.Logger

	mu    sync.Mutex
	jobs  map[int64]*jobRun
	local *ops.ProcessLocker // the locker without store leases
	// editFailed remembers the jobs whose final edit failed, to log each once.
	editFailed map[int64]bool
	closed     bool
	wg         sync.WaitGroup
	// records are the jobs' records the store has not taken yet, by job
	// (record.go); recording counts their retries, which quit, closed by
	// Shutdown, makes give up.
	records   map[int64]*record
	recording sync.WaitGroup
	quit      chan struct{}
	quitOnce  sync.Once
	// takeover is told of each job this process records interrupted
	// (SetTakeover); nil: none.
	takeover func(ctx context.Context, j store.Job) string
}

// SetTakeover sets what the engine asks about each job of a dead process
// it records interrupted (RecoverInterrupted), before it tells the job's
// room: f acts on what the job left (the door rolls back an interrupted
// rollout) and returns what the room is told of it, appended to the
// interrupted notice ("" for nothing). Set it before RecoverInterrupted
// runs; f must not call RecoverInterrupted.
func (e *Engine) SetTakeover(f func(ctx context.Context, j store.Job) string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.takeover = f
}

type jobRun struct {
	job      store.Job
	cmd      commands.Command
	room     string
	replyTo  string
	cancel   context.CancelCauseFunc
	done     chan struct{}
	userName string
	res      *ops.Result // set before done closes
	queuedAt time.Time
	safe     *safePoints
	// hold, when set, says whether this process still holds the job's
	// leases (nil: it still does); a job whose hold is lost mutates
	// nothing more and edits none of its messages.
	hold func() error
	// storeErr is the first write of this job the store refused (nil while
	// it takes them): the job then winds down (see storedown.go).
	storeErr atomic.Pointer[storeRefusal]
	// startedAt is when the job started running (zero until then); only
	// run's goroutine uses it.
	startedAt time.Time

	// cancelSeen is set once a cancel request from another process was acted on.
	cancelSeen atomic.Bool
}

// ErrCancelled is the cause of a job cancelled by a user.
var ErrCancelled = errors.New("cancelled")

// ErrShutdown is the cause of a job stopped because opsbot is shutting down.
var ErrShutdown = errors.New("opsbot is shutting down")

// NewEngine returns an engine; call Close to stop it.
func NewEngine(opts EngineOptions) *Engine {
	if opts.JobTimeout <= 0 {
		opts.JobTimeout = config.DefaultJobTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	e := &Engine{opts: opts, log: log, jobs: map[int64]*jobRun{}, local: ops.NewProcessLocker(), quit: make(chan struct{})}
	if opts.Leases != nil {
		opts.Leases.Start(e.leaseLost, e.tick)
	}
	return e
}

// deadOwnerKept is how long the record of a dead opsbot process (host, pid)
// stays in the store to name it as a former holder.
const deadOwnerKept = time.Hour

// LeaseLostError is the cause of a job stopped because a lease it held (its
// service or its node) was taken over by another opsbot process: this one
// stalled past the lease's expiry.
type LeaseLostError struct {
	Key string // "service:qwen", "node:pve"
}

func (e *LeaseLostError) Error() string {
	what, name, _ := strings.Cut(e.Key, ":")
	next := "`gpu status`"
	if what == "service" {
		next = "`svc status " + name + "`"
	}
	return fmt.Sprintf("stopped: this opsbot process lost its hold on %s %s (it stalled past the lease expiry, "+
		"and another opsbot process may be changing it now); check it with %s", what, name, next)
}

// leaseLost stops the job that held a lost lease.
func (e *Engine) leaseLost(key string, jobID int64, _ error) {
	e.mu.Lock()
	r, ok := e.jobs[jobID]
	e.mu.Unlock()
	if ok {
		r.cancel(&LeaseLostError{Key: key})
	}
}

// tick runs with the lease heartbeat, about once a second: it cancels the
// jobs another process asked to cancel through the store and, after each
// renewal, reports the jobs of opsbot processes that died as interrupted.
func (e *Engine) tick(ctx context.Context, renewed bool) {
	l := e.opts.Leases
	ids, err := e.opts.Store.CancelRequests(ctx, l.Owner().ID)
	if err != nil && ctx.Err() == nil {
		e.log.Warn("read cancel requests", "err", err)
	}
	for _, id := range ids {
		e.mu.Lock()
		r, ok := e.jobs[id]
		e.mu.Unlock()
		if ok && r.cancelSeen.CompareAndSwap(false, true) {
			e.log.Info("job cancelled from another opsbot process", "job", id)
			r.cancel(ErrCancelled)
		}
	}
	if renewed {
		if _, err := e.RecoverInterrupted(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("look for interrupted jobs", "err", err)
		}
	}
	e.ShowFinals(ctx)
}

// Submission is a job row already created (queued) with the command it runs.
type Submission struct {
	Job      store.Job
	Cmd      commands.Command
	ReplyTo  string
	UserName string // for display only
}

// Submit starts a queued job and returns at once. The job waits for its
// service's lock (mutating commands), then runs. Submit fails only when the engine is closed.
func (e *Engine) Submit(s Submission) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &jobRun{job: s.Job, cmd: s.Cmd, room: s.Job.Room, replyTo: s.ReplyTo, cancel: cancel,
		done: make(chan struct{}), userName: s.UserName, queuedAt: time.Now()}
	r.safe = &safePoints{open: map[string]bool{}, started: map[string]time.Time{}, obs: e.opts.Observer, job: s.Job}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cancel(ErrShutdown)
		return ErrShutdown
	}
	e.jobs[s.Job.ID] = r
	e.wg.Add(1)
	e.mu.Unlock()
	if o := e.opts.Observer; o != nil {
		o.JobQueued(s.Job, s.Cmd.Spec().Path)
	}
	go e.run(ctx, r)
	return nil
}

// Cancel asks job id to stop. A job of this process is cancelled at once
// and elsewhere is "". A job run by another live opsbot process is asked to
// stop through the store (that process notices within about a second) and
// elsewhere describes that process ("host1 (pid 4242)"). A job whose process
// died is reported interrupted, and the error says so; so is a job that is
// not queued or running.
func (e *Engine) Cancel(ctx context.Context, id int64) (elsewhere string, err error) {
	e.mu.Lock()
	r, ok := e.jobs[id]
	e.mu.Unlock()
	if ok {
		r.cancel(ErrCancelled)
		return "", nil
	}
	j, err := e.opts.Store.Job(ctx, id)
	if err != nil {
		return "", fmt.Errorf("cancel job #%d: %w", id, err)
	}
	if j.Status.Final() {
		return "", fmt.Errorf("job #%d is not queued or running: it %s", id, j.Status)
	}
	owner, live, err := e.opts.Store.JobOwner(ctx, id)
	if err != nil {
		return "", fmt.Errorf("cancel job #%d: %w", id, err)
	}
	mine := e.opts.Leases != nil && owner.ID == e.opts.Leases.Owner().ID
	if !live || mine {
		// Its process is gone (or this process lost it): say so instead.
		if _, err := e.RecoverInterrupted(ctx); err != nil {
			return "", fmt.Errorf("cancel job #%d: %w", id, err)
		}
		return "", fmt.Errorf("job #%d is not running: the opsbot process that ran it stopped, so it is reported interrupted", id)
	}
	if err := e.opts.Store.RequestCancel(ctx, id, "cancel"); err != nil {
		return "", fmt.Errorf("cancel job #%d in another opsbot process: %w", id, err)
	}
	where := owner.Host
	if where == "" {
		where = "another host"
	}
	if owner.PID != 0 {
		where += fmt.Sprintf(" (pid %d)", owner.PID)
	}
	return where, nil
}

// Wait blocks until job id has finished (or ctx ends) and returns its final row.
// A job not known to this engine is read from the store as it is.
func (e *Engine) Wait(ctx context.Context, id int64) (store.Job, error) {
	e.mu.Lock()
	r, ok := e.jobs[id]
	e.mu.Unlock()
	if ok {
		select {
		case <-r.done:
		case <-ctx.Done():
			return store.Job{}, ctx.Err()
		}
	}
	return e.opts.Store.Job(ctx, id)
}

// Active returns the ids of jobs queued or running in this process.
func (e *Engine) Active() []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]int64, 0, len(e.jobs))
	for id := range e.jobs {
		ids = append(ids, id)
	}
	return ids
}

// Close stops every job at its next safe point (see Shutdown) and waits for
// them to record their final state (interrupted), then stops the lease
// heartbeat and gives up this process's leases.
func (e *Engine) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.Shutdown(ctx)
}

// Shutdown refuses new jobs, lets the running ones go on until ctx ends,
// then stops each at its next safe point: at once, unless it is inside a
// unit write (with its daemon-reload) or a start, which it finishes first.
// A job so stopped ends interrupted. Shutdown returns when every job has
// recorded its final state, after stopping the lease heartbeat and giving
// up this process's leases.
func (e *Engine) Shutdown(ctx context.Context) {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		e.mu.Lock()
		for _, r := range e.jobs {
			if steps := r.safe.stopAtSafePoint(func() { r.cancel(ErrShutdown) }); len(steps) > 0 {
				e.log.Info("job stops once the step a stop must not cut ends", "job", r.job.ID, "command", r.job.Command,
					"step", strings.Join(steps, ", "))
			}
		}
		e.mu.Unlock()
		<-done
	}
	e.quitOnce.Do(func() { close(e.quit) })
	e.recording.Wait()
	if e.opts.Leases != nil {
		e.opts.Leases.Close()
	}
}

// RecoverInterrupted marks as interrupted the jobs left queued or running by
// opsbot processes that died (no live heartbeat; this process's own earlier
// runs included), with the last step each recorded and what that means
// for its host (interruptedWhy), and tells their rooms; a live process's jobs are left
// alone. Call it at start-up, before Submit; the engine also calls it after
// each lease renewal and when it takes a lease over, so a job whose process
// died is reported once its lease expires. Each job is reported once, by
// whichever process marks it.
func (e *Engine) RecoverInterrupted(ctx context.Context) ([]store.Job, error) {
	if e.opts.Leases != nil {
		e.opts.Leases.ReapDead(ctx)
	}
	jobs, err := e.opts.Store.InterruptUnfinished(ctx, interruptedWhy)
	if err != nil {
		return nil, fmt.Errorf("recover interrupted jobs: %w", err)
	}
	if l := e.opts.Leases; l != nil {
		// Forget processes dead for a while (the owners table would grow
		// by one row per crash otherwise).
		if _, err := e.opts.Store.PruneOwners(ctx, time.Now().Add(-deadOwnerKept)); err != nil {
			e.log.Warn("prune stopped opsbot processes", "err", err)
		}
	}
	e.mu.Lock()
	takeover := e.takeover
	e.mu.Unlock()
	for _, j := range jobs {
		e.log.Warn("job interrupted by a restart", "job", j.ID, "command", j.Command)
		text := interruptedNotice(j)
		if takeover != nil {
			if more := takeover(ctx, j); more != "" {
				text += " " + more
				e.log.Warn("interrupted job taken over", "job", j.ID, "what", more)
			}
		}
		ch := e.opts.Chats[j.Platform]
		if ch == nil || j.Room == "" {
			continue
		}
		m := chat.Message{Kind: chat.KindNotice, Text: text}
		if j.Thread != "" {
			_, err = ch.Reply(ctx, chat.Ref{Room: j.Room, ID: j.Thread}, m)
		} else {
			_, err = ch.Post(ctx, j.Room, m)
		}
		if err != nil {
			e.log.Warn("report interrupted job", "job", j.ID, "err", err)
		}
	}
	return jobs, nil
}

func forService(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

// lockService holds svc for job r until the hold's Release: as a store
// lease with Leases, else within this process. It waits (telling the thread
// once who holds it) until the service is free or ctx ends.
func (e *Engine) lockService(ctx, bg context.Context, r *jobRun, th *thread, svc string) (*ops.Hold, error) {
	waiting := func(holder string) {
		th.queued(bg, fmt.Sprintf("waiting for %s: %s is changing it", svc, holder))
	}
	hold, err := e.locker().LockFor(ctx, "service:"+svc, r.job.ID, waiting)
	if err != nil {
		return nil, err
	}
	if hold.TookOverFrom != "" {
		// The holder died: report its job before this one changes anything.
		if _, err := e.RecoverInterrupted(bg); err != nil {
			e.log.Warn("report the previous holder's job", "job", r.job.ID, "err", err)
		}
	}
	return hold, nil
}

// locker is the engine's one ops.Locker: the store leases, or within this
// process when it has none.
func (e *Engine) locker() ops.Locker {
	if e.opts.Leases != nil {
		return e.opts.Leases
	}
	return e.local
}

func (e *Engine) run(ctx context.Context, r *jobRun) {
	defer e.wg.Done()
	defer func() {
		e.mu.Lock()
		delete(e.jobs, r.job.ID)
		e.mu.Unlock()
		close(r.done)
	}()
	// Persistence and rendering must finish even when the job is cancelled.
	bg := context.WithoutCancel(ctx)
	e.log.Info("job queued", "job", r.job.ID, "command", r.job.Command, "user", JobOwner(r.job),
		"service", r.job.Service)

	th := newThread(e, r)
	defer th.close()
	th.post(bg)

	// The pipeline runs under the job's hold: its node locks are held for
	// the job, and it winds down when the store refuses writes.
	jh := ops.JobHold{JobID: r.job.ID, WindDown: r.storeRefusedErr, Checkpoint: e.checkpoint(r)}
	if l := e.opts.Leases; l != nil {
		// Every host command checks the hold right before it is sent.
		r.hold = func() error { return l.Check(r.job.ID) }
		jh.Held = r.hold
		defer l.ForgetJob(r.job.ID)
	}
	// Hold the service for the whole run (released even on panic or cancel).
	lockWait := time.Duration(0)
	if svc := commands.LockedService(r.cmd); svc != "" {
		t0 := time.Now()
		hold, err := e.lockService(ctx, bg, r, th, svc)
		if err != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("hold %s for job #%d: %w", svc, r.job.ID, err)
			}
			e.finish(bg, r, th, nil, err)
			return
		}
		defer hold.Release()
		jh.Epoch = hold.Epoch
		lockWait = time.Since(t0)
	}
	if err := e.opts.Store.StartJob(bg, r.job.ID); err != nil {
		e.log.Error("start job", "job", r.job.ID, "err", err)
		e.finish(bg, r, th, nil, fmt.Errorf("record job start: %w", err))
		return
	}
	r.startedAt = time.Now()
	th.started(bg)
	e.log.Info("job started", "job", r.job.ID, "command", r.job.Command, "user", JobOwner(r.job),
		"service", r.job.Service, "lock_wait", lockWait.Round(time.Millisecond))
	if o := e.opts.Observer; o != nil {
		o.JobStarted(r.job, r.cmd.Spec().Path, lockWait)
	}

	timeout := e.opts.JobTimeout
	// A sweep or a tune restarts the service once per value.
	if n := commands.Restarts(r.cmd); n > 1 {
		timeout *= time.Duration(n)
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("timed out after %s", timeout))
	defer cancel()
	res, err := e.runPipeline(runCtx, r, th, jh)
	if err != nil && runCtx.Err() != nil {
		err = &jobStopped{cause: context.Cause(runCtx), err: err}
	}
	e.finish(bg, r, th, res, err)
}

// checkpoint is job r's ops.JobHold.Checkpoint: the progress is stored as
// the job's result so far (store.SetJobProgress), once this process is
// checked to hold the job still.
func (e *Engine) checkpoint(r *jobRun) func(context.Context, *ops.Result) error {
	return func(ctx context.Context, progress *ops.Result) error {
		if r.hold != nil {
			if err := r.hold(); err != nil {
				return err
			}
		}
		b, err := json.Marshal(progress)
		if err != nil {
			return fmt.Errorf("encode the progress of job #%d: %w", r.job.ID, err)
		}
		return e.opts.Store.SetJobProgress(ctx, r.job.ID, b)
	}
}

// jobStopped is a job error caused by cancel, timeout or shutdown.
type jobStopped struct {
	cause error
	err   error
}

func (s *jobStopped) Error() string {
	if s.err == nil || errors.Is(s.err, context.Canceled) || errors.Is(s.err, context.DeadlineExceeded) {
		return s.cause.Error()
	}
	return s.cause.Error() + ": " + s.err.Error()
}
func (s *jobStopped) Unwrap() []error { return []error{s.cause, s.err} }

// runPipeline runs r's pipeline on the backend, bound to the job's hold.
func (e *Engine) runPipeline(ctx context.Context, r *jobRun, th *thread, hold ops.JobHold) (res *ops.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("job panicked", "job", r.job.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error: %v (the job was stopped; see the opsbot log)", p)
		}
	}()
	r.safe.forward = th
	job, ok := r.cmd.(commands.Job)
	if !ok {
		return nil, fmt.Errorf("%q is not a host command", r.cmd.Spec().Path)
	}
	return e.opts.Backend.Run(ctx, hold, job, r.safe)
}

// finish records how job r ended (res, err) and tells its thread: the
// outcome is what happened on the host, ended now; what the store refuses
// of its record is kept and stored once it takes writes (record.go).
func (e *Engine) finish(ctx context.Context, r *jobRun, th *thread, res *ops.Result, err error) {
	rec := &record{job: r.job, user: r.userName}
	rec.job.StartedAt = r.startedAt
	rec.end.Status, rec.end.Error = outcome(r, err)
	rec.end.At = time.Now()
	if res != nil {
		commands.NameLeft(res.Left)
		if res.Incidents == nil {
			res.Incidents = []string{}
		}
		e.benchRows(ctx, r, rec, res)
		b, mErr := json.Marshal(res)
		if mErr != nil {
			e.log.Error("encode job result", "job", r.job.ID, "err", mErr)
		} else {
			rec.end.Result = b
		}
	}
	th.drain(ctx)
	rec.events, rec.seen, rec.thread, th.unsaved = th.unsaved, th.seen, th.ref.ID, nil
	kept := e.keep(rec)
	status, errText := rec.end.Status, rec.end.Error
	r.res = res
	th.finished(ctx, status, errText, res)
	if kept {
		go e.retry(rec)
	}
	e.log.Info("job finished", "job", r.job.ID, "command", r.job.Command, "user", JobOwner(r.job),
		"service", r.job.Service, "status", status, "err", errText)
	if o := e.opts.Observer; o != nil {
		o.JobEnded(r.job, r.cmd.Spec().Path, status, time.Since(r.queuedAt), res)
	}
}

// outcome is the final state of job r whose pipeline returned err, and
// why it did not succeed. A refusing store does not make a job fail: one
// whose pipeline completed succeeded; one that wound down failed, in the
// pipeline's words, which name the store (see refusedOutcome).
func outcome(r *jobRun, err error) (store.Status, string) {
	if err == nil {
		return store.Succeeded, ""
	}
	var stopped *jobStopped
	switch {
	case errors.As(err, &stopped) && errors.Is(stopped.cause, ErrShutdown), errors.Is(err, ErrShutdown):
		return store.Interrupted, Explain(err)
	case errors.As(err, &stopped) && errors.Is(stopped.cause, ErrCancelled), errors.Is(err, ErrCancelled):
		return store.Cancelled, Explain(err)
	}
	return store.Failed, refusedOutcome(r, err, Explain(err))
}

// benchRows adds the job's benchmark results to the history (kept in rec
// when the store refuses them) and sets each beside the earlier ones in
// res: its one benchmark, or every benchmarked point of a sweep or tune.
func (e *Engine) benchRows(ctx context.Context, r *jobRun, rec *record, res *ops.Result) {
	if res.Bench != nil && !benchOfAPoint(res) {
		e.recordBench(ctx, r, rec, res)
	}
	if len(res.Points) == 0 {
		return
	}
	// Every benchmarked point of a sweep (or tune) joins the service's
	// history; the report sets each beside its previous result.
	rows := make([]store.BenchResult, len(res.Points))
	for i, p := range res.Points {
		if p.Bench != nil && p.Spec != nil {
			rows[i], _ = e.storeBench(ctx, r, rec, p.Bench, p.Spec)
		}
	}
	e.sweepReport(ctx, r, res, rows)
}

// recordBench stores the job's benchmark result and puts it beside earlier
// results of the service at the same load (prompts, concurrency, in, out),
// in res.Details: the last one at the same settings and, after a change of
// settings, the one just before at other settings. A result at another load
// is never compared: with none at this load, it says so.
func (e *Engine) recordBench(ctx context.Context, r *jobRun, rec *record, res *ops.Result) {
	if !res.Bench.Measured() {
		res.Details = append(res.Details, "no request succeeded: nothing was measured, and history keeps no row of this run")
		return
	}
	res.Details = append(res.Details, report.UnknownNotes([]ops.SweepPoint{ops.PointOf(res.Bench, res.Spec)})...)
	row, ok := e.storeBench(ctx, r, rec, res.Bench, res.Spec)
	if !ok {
		return
	}
	f, load := res.Bench, row.Load()
	prev, err := e.opts.Store.PreviousAtLoad(ctx, r.job.Service, "", load, row.ID, r.job.ID)
	if errors.Is(err, store.ErrNotFound) {
		res.Details = append(res.Details, fmt.Sprintf("no earlier result at this load (%s) to compare with", load))
		return
	}
	if err != nil {
		res.Details = append(res.Details, fmt.Sprintf("not compared with earlier results at this load (%s): opsbot's store could not be read", load))
		return
	}
	if same, err := e.opts.Store.PreviousAtLoad(ctx, r.job.Service, row.Settings, load, row.ID, r.job.ID); err == nil {
		res.Details = append(res.Details, report.CompareLine("same settings and load last time", same, f))
	}
	if prev.Settings != row.Settings {
		res.Details = append(res.Details, report.CompareLine("before, at "+prev.Settings, prev, f))
	}
}

// benchOfAPoint reports whether res.Bench is also one of res.Points'
// benchmarks: it is stored (and listed in history) once, as the point.
func benchOfAPoint(res *ops.Result) bool {
	for _, p := range res.Points {
		if p.Bench == res.Bench {
			return true
		}
	}
	return false
}

// storeBench adds one benchmark result of the job to the history, at the
// job's end time. A row the store refuses is kept in rec, stored with the
// job's record; it is returned with ID 0 (ok: it is, or will be, stored).
// A run in which no request succeeded measured nothing and is not stored
// (false).
func (e *Engine) storeBench(ctx context.Context, r *jobRun, rec *record, f *ops.BenchResult, spec *ops.Spec) (store.BenchResult, bool) {
	if !f.Measured() {
		return store.BenchResult{}, false
	}
	raw, err := json.Marshal(f)
	if err != nil {
		e.log.Error("encode bench result", "job", r.job.ID, "err", err)
		return store.BenchResult{}, false
	}
	load := report.LoadOf(f)
	row := store.BenchResult{
		JobID: r.job.ID, Service: r.job.Service, Settings: report.SettingsKey(spec), At: rec.end.At,
		OutputTokS: f.OutputTokS, PerStreamTokS: f.PerStreamTokS, AcceptLen: f.AcceptLen, AcceptRate: f.AcceptRate,
		RequestsOK: f.RequestsOK, RequestsFailed: f.RequestsFailed, Raw: raw,
		Concurrency: load.Concurrency, Prompts: load.Prompts, InputLen: load.InputLen, OutputLen: load.OutputLen,
	}
	stored, err := e.opts.Store.AddBenchResult(ctx, row)
	if store.IsRefusingWrites(err) {
		rec.bench = append(rec.bench, row)
		return row, true
	}
	if err != nil {
		e.log.Error("store bench result", "job", r.job.ID, "err", err)
		return store.BenchResult{}, false
	}
	return stored, true
}

// Chats is the adapter of each platform the engine posts to
// (EngineOptions.Chats), for the door's own messages; callers must not
// change the map.
func (e *Engine) Chats() map[string]chat.Chat { return e.opts.Chats }

// Backend is the Backend the engine runs jobs on (EngineOptions.Backend).
func (e *Engine) Backend() Backend { return e.opts.Backend }
