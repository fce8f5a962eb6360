package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/opsbot/opsbot/chat"
)

// When opsbot's store refuses writes mid-job (a full disk, a read-only
// file, an I/O error, a database away), a job makes no new change and
// leaves its service serving (ops.JobHold.WindDown), says so in its thread
// at once, and keeps what it could not record: its record (record.go) is
// stored once the store takes writes again. The recorded outcome is what
// happened on the host: a job whose pipeline completed succeeded; one that
// wound down failed, naming the store. /readyz names the store meanwhile
// (store.Ping), and opsbot_store_write_errors_total counts the refusals.

// storeRefusal is why a job winds down: the store refused one of its
// writes. One value per job, so that a pipeline's error that wraps it
// (errors.Is) says the job stopped because of it.
type storeRefusal struct{ err error }

func (e *storeRefusal) Error() string {
	return fmt.Sprintf("opsbot's store refuses writes (%v)", e.err)
}
func (e *storeRefusal) Unwrap() error { return e.err }

// storeRefusedErr is why r winds down: nil while the store takes its writes.
func (r *jobRun) storeRefusedErr() error {
	if p := r.storeErr.Load(); p != nil {
		return p
	}
	return nil
}

// storeRefused notes that the store refused one of r's writes: the first
// time, the job is asked to wind down and its thread says so.
func (e *Engine) storeRefused(ctx context.Context, t *thread, err error) {
	if !t.r.storeErr.CompareAndSwap(nil, &storeRefusal{err: err}) {
		return
	}
	e.log.Error("the store refuses writes: the job makes no new change and is recorded once the store takes writes again",
		"job", t.r.job.ID, "err", err)
	if t.chat == nil || t.ref.ID == "" {
		return
	}
	svc := t.r.job.Service
	if svc == "" {
		svc = "the service"
	}
	text := fmt.Sprintf("%s #%d: opsbot's store refuses writes (%v). The job makes no new change: it leaves %s serving "+
		"(it starts what it stopped, finishes a start it began, skips the benchmark) and says below how it left it. "+
		"What it did is recorded once the store takes writes again; `/readyz` names the store until then.",
		chat.StatusInterrupted.Icon(), t.r.job.ID, err, svc)
	if _, err := t.chat.Reply(ctx, t.ref, chat.Message{Kind: chat.KindNotice, Text: text}); err != nil {
		e.log.Warn("tell the thread that the store refuses writes", "job", t.r.job.ID, "err", err)
	}
}

// refusedOutcome is the error text of a job that failed (err, explained
// as errText) after its store refused a write: the pipeline's own words
// when it wound down because of it (they name the store and the state it
// left); else its error, naming the store beside it. A job whose pipeline
// completed is not failed by a refusal: what happened on the host stands.
func refusedOutcome(r *jobRun, err error, errText string) string {
	refusal := r.storeRefusedErr()
	if refusal == nil || errors.Is(err, refusal) {
		return errText
	}
	return errText + "; meanwhile " + refusal.Error()
}
