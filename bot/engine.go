package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// Backend runs the pipeline of a job command. It reports progress through rep
// and returns the result, or an error that says why the job could not finish
// (the result may be non-nil with an error: what was done before it failed).
// Run must honour ctx: on cancel or timeout it stops and leaves the host in a
// known state.
type Backend interface {
	Run(ctx context.Context, cmd *commands.Command, rep ops.Reporter) (*ops.Result, error)
}

// EngineOptions configure a job Engine.
type EngineOptions struct {
	Store   *store.Store
	Backend Backend
	// Chats maps a platform name ("slack", "matrix", "console") to its adapter.
	// A job from a platform without a chat runs without a thread.
	Chats map[string]Chat
	// JobTimeout bounds how long one job may run (not wait for its lock).
	JobTimeout time.Duration
	Logger     *slog.Logger
}

// Engine runs jobs: one mutating job per host at a time, read-only jobs at
// once; every job has a timeout and a cancel handle, persists its events and
// final state, and renders its status thread. Safe for concurrent use.
type Engine struct {
	opts EngineOptions
	log  *slog.Logger

	mu     sync.Mutex
	jobs   map[int64]*jobRun
	locks  map[string]chan struct{}
	closed bool
	wg     sync.WaitGroup
}

type jobRun struct {
	job      store.Job
	cmd      *commands.Command
	room     string
	replyTo  string
	cancel   context.CancelCauseFunc
	done     chan struct{}
	userName string
	res      *ops.Result // set before done closes
}

// ErrCancelled is the cause of a job cancelled by a user.
var ErrCancelled = errors.New("cancelled")

// ErrShutdown is the cause of a job stopped because opsbot is shutting down.
var ErrShutdown = errors.New("opsbot is shutting down")

// NewEngine returns an engine; call Close to stop it.
func NewEngine(opts EngineOptions) *Engine {
	if opts.JobTimeout <= 0 {
		opts.JobTimeout = 30 * time.Minute
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Engine{opts: opts, log: log, jobs: map[int64]*jobRun{}, locks: map[string]chan struct{}{}}
}

// Submission is a job row already created (queued) with the command it runs.
type Submission struct {
	Job      store.Job
	Cmd      *commands.Command
	ReplyTo  string
	UserName string // for display only
}

// Submit starts a queued job and returns at once. The job waits for its host
// lock (mutating commands), then runs. Submit fails only when the engine is closed.
func (e *Engine) Submit(s Submission) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &jobRun{job: s.Job, cmd: s.Cmd, room: s.Job.Room, replyTo: s.ReplyTo, cancel: cancel,
		done: make(chan struct{}), userName: s.UserName}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cancel(ErrShutdown)
		return ErrShutdown
	}
	e.jobs[s.Job.ID] = r
	e.wg.Add(1)
	e.mu.Unlock()
	go e.run(ctx, r)
	return nil
}

// Cancel asks job id to stop. It returns an error when the job is not running
// or queued in this process.
func (e *Engine) Cancel(id int64) error {
	e.mu.Lock()
	r, ok := e.jobs[id]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("job #%d is not queued or running", id)
	}
	r.cancel(ErrCancelled)
	return nil
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

// Close cancels every job and waits for them to record their final state.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	for _, r := range e.jobs {
		r.cancel(ErrShutdown)
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// RecoverInterrupted marks jobs left queued or running by a previous process as
// interrupted and tells their rooms. Call it once at start-up, before Submit.
func (e *Engine) RecoverInterrupted(ctx context.Context) ([]store.Job, error) {
	jobs, err := e.opts.Store.InterruptUnfinished(ctx)
	if err != nil {
		return nil, fmt.Errorf("recover interrupted jobs: %w", err)
	}
	for _, j := range jobs {
		e.log.Warn("job interrupted by a restart", "job", j.ID, "command", j.Command)
		chat := e.opts.Chats[j.Platform]
		if chat == nil || j.Room == "" {
			continue
		}
		text := fmt.Sprintf("%s #%d `%s` was interrupted: opsbot stopped while it ran. "+
			"The host may be mid-change; check it with `svc status`%s.",
			statusIcon[store.Interrupted], j.ID, j.Command, forService(j.Service))
		m := Message{Kind: KindNotice, Text: text}
		if j.Thread != "" {
			_, err = chat.Reply(ctx, Ref{Room: j.Room, ID: j.Thread}, m)
		} else {
			_, err = chat.Post(ctx, j.Room, m)
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

func (e *Engine) lockFor(host string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	l, ok := e.locks[host]
	if !ok {
		l = make(chan struct{}, 1)
		e.locks[host] = l
	}
	return l
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

	th := newThread(e, r)
	defer th.close()
	th.post(bg)

	// Wait for the host lock.
	if r.cmd.Spec.Lock == commands.LockHost && !r.cmd.DryRun && r.job.Host != "" {
		l := e.lockFor(r.job.Host)
		select {
		case l <- struct{}{}:
		default:
			th.queued(bg, fmt.Sprintf("waiting for %s: another job is changing it", r.job.Host))
			select {
			case l <- struct{}{}:
			case <-ctx.Done():
				e.finish(bg, r, th, nil, context.Cause(ctx))
				return
			}
		}
		defer func() { <-l }()
	}
	if err := e.opts.Store.StartJob(bg, r.job.ID); err != nil {
		e.log.Error("start job", "job", r.job.ID, "err", err)
		e.finish(bg, r, th, nil, fmt.Errorf("record job start: %w", err))
		return
	}
	th.started(bg)

	timeout := e.opts.JobTimeout
	if n := len(r.cmd.SweepSteps); n > 1 {
		timeout *= time.Duration(n)
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("timed out after %s", timeout))
	defer cancel()
	res, err := e.runPipeline(runCtx, r, th)
	if err != nil && runCtx.Err() != nil {
		err = &jobStopped{cause: context.Cause(runCtx), err: err}
	}
	e.finish(bg, r, th, res, err)
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

func (e *Engine) runPipeline(ctx context.Context, r *jobRun, th *thread) (res *ops.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("job panicked", "job", r.job.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error: %v (the job was stopped; see the opsbot log)", p)
		}
	}()
	return e.opts.Backend.Run(ctx, r.cmd, th)
}

func (e *Engine) finish(ctx context.Context, r *jobRun, th *thread, res *ops.Result, err error) {
	status := store.Succeeded
	errText := ""
	if err != nil {
		status = store.Failed
		var stopped *jobStopped
		if errors.As(err, &stopped) && (errors.Is(stopped.cause, ErrCancelled) || errors.Is(stopped.cause, ErrShutdown)) {
			status = store.Cancelled
		} else if errors.Is(err, ErrCancelled) || errors.Is(err, ErrShutdown) {
			status = store.Cancelled
		}
		errText = Explain(err)
	}
	if res != nil && res.Incidents == nil {
		res.Incidents = []string{}
	}
	if res != nil && res.Bench != nil {
		e.recordBench(ctx, r, res)
	}
	if res != nil {
		// Every benchmarked point of a sweep joins the service's history.
		for _, p := range res.Points {
			if p.Bench != nil && p.Spec != nil {
				e.storeBench(ctx, r, p.Bench, p.Spec)
			}
		}
	}
	var raw json.RawMessage
	if res != nil {
		b, mErr := json.Marshal(res)
		if mErr != nil {
			e.log.Error("encode job result", "job", r.job.ID, "err", mErr)
		} else {
			raw = b
		}
	}
	th.drain(ctx)
	if fErr := e.opts.Store.FinishJob(ctx, r.job.ID, status, errText, raw); fErr != nil {
		e.log.Error("finish job", "job", r.job.ID, "err", fErr)
	}
	r.res = res
	th.finished(ctx, status, errText, res)
	e.log.Info("job finished", "job", r.job.ID, "command", r.job.Command, "status", status, "err", errText)
}

// SettingsKey renders a result's settings as the canonical key results are
// compared by ("steps=10,topk=1,draft=11").
func SettingsKey(s *ops.Spec) string {
	if s == nil {
		return ""
	}
	return fmt.Sprintf("steps=%d,topk=%d,draft=%d", s.Steps, s.TopK, s.DraftTokens)
}

// recordBench stores the job's benchmark result and puts it beside the last
// result at the same settings and, after a change of settings, beside the
// service's result just before it, in res.Details.
func (e *Engine) recordBench(ctx context.Context, r *jobRun, res *ops.Result) {
	row, ok := e.storeBench(ctx, r, res.Bench, res.Spec)
	if !ok {
		return
	}
	f := res.Bench
	if same, err := e.opts.Store.PreviousBenchResult(ctx, r.job.Service, row.Settings, row.ID); err == nil {
		res.Details = append(res.Details, compareLine("same settings last time", same, f))
	}
	if hist, err := e.opts.Store.BenchHistory(ctx, r.job.Service, 2); err == nil && len(hist) == 2 && hist[1].Settings != row.Settings {
		res.Details = append(res.Details, compareLine("before, at "+hist[1].Settings, hist[1], f))
	}
}

// storeBench adds one benchmark result of the job to the history.
func (e *Engine) storeBench(ctx context.Context, r *jobRun, f *ops.BenchResult, spec *ops.Spec) (store.BenchResult, bool) {
	raw, err := json.Marshal(f)
	if err != nil {
		e.log.Error("encode bench result", "job", r.job.ID, "err", err)
		return store.BenchResult{}, false
	}
	row, err := e.opts.Store.AddBenchResult(ctx, store.BenchResult{
		JobID: r.job.ID, Service: r.job.Service, Settings: SettingsKey(spec), At: time.Now(),
		OutputTokS: f.OutputTokS, PerStreamTokS: f.PerStreamTokS, AcceptLen: f.AcceptLen, AcceptRate: f.AcceptRate,
		RequestsOK: f.RequestsOK, RequestsFailed: f.RequestsFailed, Concurrency: f.Concurrency, Raw: raw,
	})
	if err != nil {
		e.log.Error("store bench result", "job", r.job.ID, "err", err)
		return store.BenchResult{}, false
	}
	return row, true
}

func compareLine(label string, prev store.BenchResult, cur *ops.BenchResult) string {
	pct := func(a, b float64) string {
		if a == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%+.1f%%", (b-a)/a*100)
	}
	return fmt.Sprintf("%s (#%d, %s): %.1f → %.1f tok/s (%s), accept len %.2f → %.2f",
		label, prev.JobID, prev.At.UTC().Format("2006-01-02 15:04"), prev.OutputTokS, cur.OutputTokS,
		pct(prev.OutputTokS, cur.OutputTokS), prev.AcceptLen, cur.AcceptLen)
}
