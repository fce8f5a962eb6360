package bot

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// thread renders one job: a root status message edited in place and step lines
// in its thread. It is the job's ops.Reporter: Report never blocks on the
// network or the store; a goroutine owned by the thread persists events and
// sends coalesced updates, at most one per the chat's EditInterval.
type thread struct {
	e    *Engine
	r    *jobRun
	chat Chat
	ref  Ref

	mu      sync.Mutex
	pending []ops.Event
	view    JobView

	wake     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
	interval time.Duration
}

func newThread(e *Engine, r *jobRun) *thread {
	t := &thread{
		e: e, r: r, chat: e.opts.Chats[r.job.Platform],
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
		view: JobView{ID: r.job.ID, Command: r.job.Command, User: r.userName, Status: store.Queued},
	}
	if p, ok := t.chat.(Pacer); ok {
		t.interval = p.EditInterval()
	}
	go t.loop()
	return t
}

var _ ops.Reporter = (*thread)(nil)

// Report queues an event for persistence and rendering.
func (t *thread) Report(ev ops.Event) {
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	t.mu.Lock()
	t.pending = append(t.pending, ev)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *thread) loop() {
	defer close(t.stopped)
	ctx := context.Background()
	for {
		select {
		case <-t.wake:
		case <-t.stop:
			t.flush(ctx)
			return
		}
		t.flush(ctx)
		if t.interval > 0 {
			timer := time.NewTimer(t.interval)
			select {
			case <-timer.C:
			case <-t.stop:
				timer.Stop()
				t.flush(ctx)
				return
			}
		}
	}
}

func (t *thread) flush(ctx context.Context) {
	t.mu.Lock()
	evs := t.pending
	t.pending = nil
	t.mu.Unlock()
	if len(evs) == 0 {
		return
	}
	lines := make([]string, 0, len(evs))
	for _, ev := range evs {
		if err := t.e.opts.Store.AppendEvent(ctx, store.Event{JobID: t.r.job.ID, At: ev.At, Step: ev.Step,
			Status: string(ev.Status), Message: ev.Message}); err != nil {
			t.e.log.Error("store job event", "job", t.r.job.ID, "err", err)
		}
		lines = append(lines, RenderEvent(ev))
	}
	last := evs[len(evs)-1]
	t.mu.Lock()
	t.view.Step, t.view.StepMessage = last.Step, last.Message
	t.view.Steps += len(evs)
	view := t.view
	t.mu.Unlock()
	if t.chat == nil || t.ref.ID == "" {
		return
	}
	if _, err := t.chat.Reply(ctx, t.ref, Message{Kind: KindStep, Text: strings.Join(lines, "\n")}); err != nil {
		t.e.log.Warn("post step lines", "job", t.r.job.ID, "err", err)
	}
	t.edit(ctx, view, false)
}

func (t *thread) edit(ctx context.Context, v JobView, final bool) {
	if t.chat == nil || t.ref.ID == "" {
		return
	}
	if err := t.chat.Edit(ctx, t.ref, Message{Kind: KindStatus, Text: RenderStatus(v, time.Now()), Final: final}); err != nil {
		t.e.log.Warn("edit status message", "job", t.r.job.ID, "err", err)
	}
}

// post sends the root status message (queued).
func (t *thread) post(ctx context.Context) {
	if t.chat == nil || t.r.room == "" {
		return
	}
	ref, err := t.chat.Post(ctx, t.r.room, Message{Kind: KindStatus, Text: RenderStatus(t.view, time.Now()), ReplyTo: t.r.replyTo})
	if err != nil {
		t.e.log.Warn("post status message", "job", t.r.job.ID, "err", err)
		return
	}
	t.ref = ref
	if err := t.e.opts.Store.SetJobThread(ctx, t.r.job.ID, ref.ID); err != nil {
		t.e.log.Warn("store thread ref", "job", t.r.job.ID, "err", err)
	}
}

func (t *thread) queued(ctx context.Context, msg string) {
	t.mu.Lock()
	t.view.StepMessage = msg
	v := t.view
	t.mu.Unlock()
	t.edit(ctx, v, false)
}

func (t *thread) started(ctx context.Context) {
	t.mu.Lock()
	t.view.Status = store.Running
	t.view.Started = time.Now()
	t.view.StepMessage = ""
	v := t.view
	t.mu.Unlock()
	t.edit(ctx, v, false)
}

// drain persists and renders every event reported so far and stops the loop.
func (t *thread) drain(context.Context) {
	t.stopOnce.Do(func() { close(t.stop) })
	<-t.stopped
}

func (t *thread) close() { t.drain(context.Background()) }

func (t *thread) finished(ctx context.Context, st store.Status, errText string, res *ops.Result) {
	t.mu.Lock()
	t.view.Status = st
	t.view.Ended = time.Now()
	if t.view.Started.IsZero() {
		t.view.Started = t.view.Ended
	}
	t.view.Error = errText
	if res != nil {
		t.view.Summary = res.Summary
	}
	v := t.view
	t.mu.Unlock()
	t.edit(ctx, v, true)
	if t.chat == nil || t.ref.ID == "" {
		return
	}
	m := Message{Kind: KindResult, Text: RenderResult(v, res)}
	if res != nil && len(res.Chart) > 0 {
		m.Image = &Image{Name: "sweep.png", PNG: res.Chart}
	}
	if _, err := t.chat.Reply(ctx, t.ref, m); err != nil {
		t.e.log.Warn("post result", "job", t.r.job.ID, "err", err)
	}
}
