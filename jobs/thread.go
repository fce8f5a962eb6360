package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/opsbot/opsbot/chat"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// thread renders one job: a root status message edited in place and step lines
// in its thread. It is the job's ops.Reporter: Report never blocks on the
// network or the store; a goroutine owned by the thread persists events and
// sends coalesced updates, at most one per the chat's EditInterval.
type thread struct {
	e    *Engine
	r    *jobRun
	chat chat.Chat
	ref  chat.Ref

	mu      sync.Mutex
	pending []ops.Event
	view    report.JobView

	// unsaved are the events the store refused, in order, kept for the
	// engine to record later; only the thread's loop touches it until
	// drain returns.
	unsaved []store.Event
	// seen are every event of the job, stored or not, in order (the loop's,
	// as unsaved): how it ended on its host when the store has not taken it.
	seen []store.Event

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
		view: report.JobView{ID: r.job.ID, Command: r.job.Command, User: r.userName, Status: store.Queued},
	}
	if p, ok := t.chat.(chat.Pacer); ok {
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
		se := store.Event{JobID: t.r.job.ID, At: ev.At, Step: ev.Step, Status: string(ev.Status), Message: ev.Message}
		t.seen = append(t.seen, se)
		if len(t.unsaved) > 0 {
			t.unsaved = append(t.unsaved, se) // after a refused one: kept in order
		} else if err := t.e.opts.Store.AppendEvent(ctx, se); store.IsRefusingWrites(err) {
			t.unsaved = append(t.unsaved, se)
			t.e.storeRefused(ctx, t, err)
		} else if err != nil {
			t.e.log.Error("store job event", "job", t.r.job.ID, "err", err)
		}
		lines = append(lines, report.RenderEvent(ev))
	}
	last := evs[len(evs)-1]
	t.mu.Lock()
	t.view.Step, t.view.StepMessage = last.Step, last.Message
	t.view.Steps += len(evs)
	view := t.view
	t.mu.Unlock()
	if t.chat == nil || t.ref.ID == "" || !t.held() {
		return
	}
	if _, err := t.chat.Reply(ctx, t.ref, chat.Message{Kind: chat.KindStep, Text: strings.Join(lines, "\n")}); err != nil {
		t.e.log.Warn("post step lines", "job", t.r.job.ID, "err", err)
	}
	t.edit(ctx, view)
}

// held reports whether this process still holds the job: a job whose
// hold is lost edits none of its messages (the store's state, shown by
// whichever process records it, is what chat shows).
func (t *thread) held() bool { return t.r.hold == nil || t.r.hold() == nil }

// edit shows v on the status message while the job runs. The final edit
// is ShowFinal's, from the store.
func (t *thread) edit(ctx context.Context, v report.JobView) {
	if t.chat == nil || t.ref.ID == "" || !t.held() {
		return
	}
	if err := t.chat.Edit(ctx, t.ref, chat.Message{Kind: chat.KindStatus, Text: report.RenderStatus(v, time.Now()), Status: viewStatus(v)}); err != nil {
		t.e.log.Warn("edit status message", "job", t.r.job.ID, "err", err)
	}
}

// viewStatus is the typed status a view shows: Waiting for a queued job
// that waits for another's lock.
func viewStatus(v report.JobView) chat.Status {
	if v.Status == store.Queued && v.StepMessage != "" {
		return chat.StatusWaiting
	}
	return chat.Status(v.Status)
}

// post sends the root status message (queued).
func (t *thread) post(ctx context.Context) {
	if t.chat == nil || t.r.room == "" {
		return
	}
	ref, err := t.chat.Post(ctx, t.r.room, chat.Message{Kind: chat.KindStatus, Text: report.RenderStatus(t.view, time.Now()), ReplyTo: t.r.replyTo,
		Status: chat.StatusQueued})
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
	t.edit(ctx, v)
}

func (t *thread) started(ctx context.Context) {
	t.mu.Lock()
	t.view.Status = store.Running
	t.view.Started = time.Now()
	t.view.StepMessage = ""
	v := t.view
	t.mu.Unlock()
	t.edit(ctx, v)
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
	v.Error = report.ShownOnce(v.Error, opsEvents(t.seen)) // in full on its step's line above
	if t.chat == nil || t.ref.ID == "" {
		return
	}
	// The final edit shows the store's final state, once, whichever
	// process makes it.
	if j, err := t.e.opts.Store.Job(ctx, t.r.job.ID); err != nil {
		t.e.log.Warn("read the job's final state for its status message (shown when the store answers)", "job", t.r.job.ID, "err", err)
	} else if j.Thread == "" {
		j.Thread = t.ref.ID // recording the message failed; it is known here
		t.e.ShowFinal(ctx, j, t.r.userName)
	} else {
		t.e.ShowFinal(ctx, j, t.r.userName)
	}
	m := chat.Message{Kind: chat.KindResult, Text: report.RenderResult(v, res)}
	if res != nil && len(res.Chart) > 0 {
		m.Image = &chat.Image{Name: report.ChartName(t.r.job.ID), PNG: res.Chart}
	}
	if _, err := t.chat.Reply(ctx, t.ref, m); err != nil {
		t.e.log.Warn("post result", "job", t.r.job.ID, "err", err)
	}
}

// ShowFinal edits j's status message to the final state the store records
// for it, unless j is not final yet or another process claimed that edit
// (store.ClaimFinalShown); user names the requester ("" for the stored user
// id). An edit that fails gives its claim back, so it is tried again. It
// reports whether the edit was made.
func (e *Engine) ShowFinal(ctx context.Context, j store.Job, user string) bool {
	ch := e.opts.Chats[j.Platform]
	if ch == nil || j.Thread == "" || !j.Status.Final() {
		return false
	}
	claimed, err := e.opts.Store.ClaimFinalShown(ctx, j.ID)
	if err != nil {
		e.log.Warn("claim a job's final edit", "job", j.ID, "err", err)
		return false
	}
	if !claimed {
		return false
	}
	// The state the store holds now, as claimed: a late record may have
	// replaced the one read before the claim (and the late record gives
	// the claim back, so an edit that read it before is made again).
	if cur, err := e.opts.Store.Job(ctx, j.ID); err == nil && cur.Status.Final() {
		if cur.Thread == "" {
			cur.Thread = j.Thread
		}
		j = cur
	}
	if user == "" {
		user = j.User
	}
	v := finalView(j, user)
	if evs, err := e.opts.Store.Events(ctx, j.ID); err == nil {
		v.Error = report.ShownOnce(v.Error, opsEvents(evs)) // in full on its step's line in the thread
	}
	m := chat.Message{Kind: chat.KindStatus, Text: report.RenderStatus(v, time.Now()), Final: true, Status: chat.Status(j.Status)}
	if j.RecordedLate {
		// The outcome replaces the interruption another process recorded
		// and may have shown: one outcome per message.
		m.Replaces = chat.StatusInterrupted
	}
	if err := ch.Edit(ctx, chat.Ref{Room: j.Room, ID: j.Thread}, m); err != nil {
		if rErr := e.opts.Store.ReleaseFinalShown(context.WithoutCancel(ctx), j.ID); rErr != nil {
			e.log.Warn("give back a job's final edit", "job", j.ID, "err", rErr)
		}
		if e.noteEditFailure(j.ID) {
			e.log.Warn("show a job's final state on its status message (tried again every second)", "job", j.ID, "err", err)
		}
		return false
	}
	return true
}

// noteEditFailure remembers that job id's final edit failed and reports
// whether it is the first time (the one logged).
func (e *Engine) noteEditFailure(id int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.editFailed == nil {
		e.editFailed = map[int64]bool{}
	}
	if e.editFailed[id] {
		return false
	}
	if len(e.editFailed) > 1000 {
		clear(e.editFailed)
	}
	e.editFailed[id] = true
	return true
}

// ShowFinals edits the status message of every final job of this process's
// platforms that does not show its final state yet: jobs another process
// (or an `opsbot run` on the same store) recorded interrupted or finished,
// jobs whose own process lost their lease, edits that failed. It runs at
// start and with every heartbeat tick (about once a second).
func (e *Engine) ShowFinals(ctx context.Context) {
	platforms := make([]string, 0, len(e.opts.Chats))
	for p, c := range e.opts.Chats {
		if c != nil {
			platforms = append(platforms, p)
		}
	}
	jobs, err := e.opts.Store.UnshownFinals(ctx, platforms, 20)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("look for status messages to finish", "err", err)
		}
		return
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		e.ShowFinal(ctx, j, "")
	}
}

// finalView is what a final status message shows of j, from the store.
// opsEvents are a job's stored events as its pipeline reported them.
func opsEvents(evs []store.Event) []ops.Event {
	out := make([]ops.Event, len(evs))
	for i, e := range evs {
		out[i] = ops.Event{At: e.At, Step: e.Step, Status: ops.StepStatus(e.Status), Message: e.Message}
	}
	return out
}

func finalView(j store.Job, user string) report.JobView {
	v := report.JobView{ID: j.ID, Command: j.Command, User: user, Status: j.Status, Started: j.StartedAt, Ended: j.EndedAt, Error: j.Error}
	if v.Started.IsZero() {
		v.Started = v.Ended
	}
	if len(j.Result) > 0 {
		var res ops.Result
		if json.Unmarshal(j.Result, &res) == nil {
			v.Summary = res.Summary
		}
	}
	if j.Status == store.Interrupted && j.Error == store.InterruptedMessage {
		v.Error = fmt.Sprintf("%s. The host may be mid-change: check it with `svc status%s`.", j.Error, forService(j.Service))
	}
	if j.RecordedLate {
		v.Error = strings.TrimSpace(v.Error + "\n(recorded late: the opsbot process that ran it had lost its lease, and another had marked it interrupted)")
	}
	return v
}
