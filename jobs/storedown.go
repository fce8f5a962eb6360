package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/chat"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// When opsbot's store refuses writes mid-job (a full disk, a read-only
// file, an I/O error), a job makes no new change and leaves its service
// serving (ops.JobHold.WindDown), says so in its thread at once, keeps what it
// could not record, and records it, failed and naming the store, once the
// store takes writes again. /readyz names the store meanwhile
// (store.Ping), and opsbot_store_write_errors_total counts the refusals.

// storeRefusedErr is why r winds down: nil while the store takes its writes.
func (r *jobRun) storeRefusedErr() error {
	if p := r.storeErr.Load(); p != nil {
		return fmt.Errorf("opsbot's store refuses writes (%v)", *p)
	}
	return nil
}

// storeRefused notes that the store refused one of r's writes: the first
// time, the job is asked to wind down and its thread says so.
func (e *Engine) storeRefused(ctx context.Context, t *thread, err error) {
	if !t.r.storeErr.CompareAndSwap(nil, &err) {
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

// refusedOutcome is how a job that met a refusing store is recorded:
// failed, naming the store and the state it left.
func refusedOutcome(r *jobRun, res *ops.Result, errText string) string {
	why := r.storeRefusedErr().Error() + " during the job, so it made no new change"
	switch {
	case strings.Contains(errText, "store refuses writes"):
		return errText // the pipeline said it, with the state it left
	case errText != "":
		return why + ": " + errText
	case res != nil && res.Summary != "":
		return why + "; it ended: " + res.Summary
	}
	return why
}

// pendingRecord is what a job could not record while the store refused
// writes: its events not yet stored and its final state.
type pendingRecord struct {
	jobID    int64
	events   []store.Event
	finished bool // the final state is recorded; only events wait
	status   store.Status
	errText  string
	result   json.RawMessage
}

// recordLater records p once the store takes writes again, trying with a
// backoff from 250 ms to 30 s while this process lives (and the store is
// open). The job's status message follows the store (ShowFinals).
func (e *Engine) recordLater(p pendingRecord) {
	e.recording.Add(1)
	go func() {
		defer e.recording.Done()
		backoff := 250 * time.Millisecond
		for {
			err := e.record(&p)
			if err == nil {
				e.log.Info("the store takes writes again: the job is recorded", "job", p.jobID, "status", p.status)
				return
			}
			if !store.IsRefusingWrites(err) {
				e.log.Error("record a job the store refused earlier", "job", p.jobID, "err", err)
				return
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-e.quit:
				t.Stop()
				if e.record(&p) == nil {
					return
				}
				e.log.Error("opsbot stops while its store refuses writes: the job's end is not recorded", "job", p.jobID,
					"status", p.status, "err", err)
				return
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}()
}

// record stores p's events (each once) and final state.
func (e *Engine) record(p *pendingRecord) error {
	ctx := context.Background()
	for len(p.events) > 0 {
		if err := e.opts.Store.AppendEvent(ctx, p.events[0]); err != nil {
			return err
		}
		p.events = p.events[1:]
	}
	if p.finished {
		return nil
	}
	err := e.opts.Store.FinishJob(ctx, p.jobID, p.status, p.errText, p.result)
	var te *store.TransitionError
	if errors.As(err, &te) && te.From == store.Interrupted {
		err = e.opts.Store.FinishJobLate(ctx, p.jobID, p.status, p.errText, p.result)
	}
	return err
}
