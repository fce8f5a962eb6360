package jobs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/opsbot/opsbot/store"
)

// A job's record is everything it makes for the store at its end: the
// events its thread could not store, its benchmark rows and its final
// state. This file is the one home of "kept and retried until stored":
// what the store refuses (store.IsRefusingWrites) is kept in memory and
// tried again, with a backoff, while this process lives; what it refuses
// for any other reason is logged and dropped. The final state carries the
// time the job ended, so a record stored late still says when the job
// ended on its host.

// recordRetryMax caps the backoff between tries of a kept record: a store
// back from an outage takes it within this long.
const recordRetryMax = 5 * time.Second

// record is what one job made that the store has not taken yet, stored in
// this order: events (in order), benchmark rows, final state.
type record struct {
	job    store.Job     // as submitted, StartedAt set when it started
	user   string        // who asked, for the final edit
	thread string        // its status message's id ("" when none), for the final edit
	end    store.Ending  // how it ended on its host; never changes
	seen   []store.Event // every event it reported, stored or not; never changes

	mu      sync.Mutex
	events  []store.Event
	bench   []store.BenchResult
	ended   bool  // end is stored
	refusal error // the store's last refusal of it

	done chan struct{} // closed once every part is stored, or when opsbot stops first
	err  error         // set before done closes: nil when stored, else why it is not
}

// Unrecorded is what a job that ran in this process made and its store
// has not taken yet: how the job ended on its host.
type Unrecorded struct {
	Job    store.Job     // as submitted, StartedAt set when it started
	Ending store.Ending  // its final state, At when it ended
	Events []store.Event // every event it reported, stored or not, in order
	// Refusal is why the store has not taken it: its last refusal, or
	// that opsbot stopped before it did.
	Refusal error
}

// Unrecorded returns what job id made that the store has not taken yet;
// ok is false when nothing of it waits (or the job is not this process's).
func (e *Engine) Unrecorded(id int64) (u Unrecorded, ok bool) {
	e.mu.Lock()
	rec := e.records[id]
	e.mu.Unlock()
	if rec == nil {
		return Unrecorded{}, false
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	u = Unrecorded{Job: rec.job, Ending: rec.end, Events: append([]store.Event(nil), rec.seen...), Refusal: rec.refusal}
	select {
	case <-rec.done:
		if rec.err != nil {
			u.Refusal = rec.err
		}
	default:
	}
	return u, true
}

// AwaitRecord waits until the store has taken everything job id made in
// this process (at once when nothing of it waits) and returns nil; it
// returns ctx's error when ctx ends first, and why not when opsbot stops
// before the store took it (Shutdown, Close).
func (e *Engine) AwaitRecord(ctx context.Context, id int64) error {
	e.mu.Lock()
	rec := e.records[id]
	e.mu.Unlock()
	if rec == nil {
		return nil
	}
	select {
	case <-rec.done:
		return rec.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keep stores rec now and reports whether part of it waits, the store
// refusing it: rec is then registered (Unrecorded, AwaitRecord), and the
// caller starts retry once it has told the job's thread how it ended.
func (e *Engine) keep(rec *record) bool {
	err := e.storeRecord(rec)
	if err == nil {
		return false
	}
	rec.refusal = err
	rec.done = make(chan struct{})
	e.mu.Lock()
	if e.records == nil {
		e.records = map[int64]*record{}
	}
	e.records[rec.job.ID] = rec
	e.mu.Unlock()
	e.recording.Add(1)
	e.log.Warn("the store refuses writes: the job's record is kept and stored once it takes them", "job", rec.job.ID,
		"status", rec.end.Status, "err", err)
	return true
}

// retry stores rec once the store takes writes again, trying with a
// backoff from 250 ms to recordRetryMax while this process lives; then it
// shows the job's final state on its status message. When Shutdown stops
// it first, it tries once more and gives up.
func (e *Engine) retry(rec *record) {
	defer e.recording.Done()
	backoff := 250 * time.Millisecond
	for {
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-e.quit:
			t.Stop()
			err := e.storeRecord(rec)
			if err != nil {
				e.log.Error("opsbot stops while its store refuses writes: the job's end is not recorded (the next opsbot "+
					"process on the store reports it interrupted, with the last step it recorded)", "job", rec.job.ID,
					"status", rec.end.Status, "err", err)
				err = errors.New("opsbot stopped before its store took the job's record: " + err.Error())
			}
			e.settle(rec, err)
			return
		}
		err := e.storeRecord(rec)
		if err == nil {
			e.log.Info("the store takes writes again: the job is recorded", "job", rec.job.ID, "status", rec.end.Status)
			if j, err := e.opts.Store.Job(context.Background(), rec.job.ID); err == nil {
				if j.Thread == "" {
					j.Thread = rec.thread // recording the message failed; it is known here
				}
				e.ShowFinal(context.Background(), j, rec.user)
			}
			e.settle(rec, nil)
			return
		}
		rec.mu.Lock()
		rec.refusal = err
		rec.mu.Unlock()
		backoff = min(2*backoff, recordRetryMax)
	}
}

// settle ends rec's wait with err (nil: stored); a stored record is
// forgotten.
func (e *Engine) settle(rec *record, err error) {
	rec.err = err
	if err == nil {
		e.mu.Lock()
		delete(e.records, rec.job.ID)
		e.mu.Unlock()
	}
	close(rec.done)
}

// storeRecord stores what of rec the store has not taken, in order, each
// part once: a part whose write failed may have landed all the same (a
// commit whose answer was lost), so each is written so that a second try
// adds nothing (AppendEventOnce, AddBenchResultOnce, EndJob). It returns
// the store's refusal, with the rest still in rec; a part refused for
// another reason is logged and dropped.
func (e *Engine) storeRecord(rec *record) error {
	ctx, st := context.Background(), e.opts.Store
	for {
		rec.mu.Lock()
		var ev *store.Event
		if len(rec.events) > 0 {
			ev = &rec.events[0]
		}
		rec.mu.Unlock()
		if ev == nil {
			break
		}
		if err := st.AppendEventOnce(ctx, *ev); store.IsRefusingWrites(err) {
			return err
		} else if err != nil {
			e.log.Error("store job event", "job", rec.job.ID, "err", err)
		}
		rec.mu.Lock()
		rec.events = rec.events[1:]
		rec.mu.Unlock()
	}
	for len(rec.bench) > 0 { // only this goroutine changes bench
		if _, err := st.AddBenchResultOnce(ctx, rec.bench[0]); store.IsRefusingWrites(err) {
			return err
		} else if err != nil {
			e.log.Error("store bench result", "job", rec.job.ID, "err", err)
		}
		rec.bench = rec.bench[1:]
	}
	if rec.ended {
		return nil
	}
	late, err := st.EndJob(ctx, rec.job.ID, rec.end)
	switch {
	case store.IsRefusingWrites(err):
		return err
	case err != nil:
		e.log.Error("finish job", "job", rec.job.ID, "err", err)
	case late:
		// Another process marked it interrupted while this one had lost
		// its lease: its real outcome is recorded, marked late.
		e.log.Warn("job was marked interrupted by another opsbot process; recorded its real outcome late", "job", rec.job.ID,
			"status", rec.end.Status)
	}
	rec.mu.Lock()
	rec.ended = true
	rec.mu.Unlock()
	return nil
}
