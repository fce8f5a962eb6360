package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Event is one line of a job's history: a step starting, progressing,
// finishing or failing.
type Event struct {
	JobID   int64
	Seq     int       // 1, 2, 3, ... per job, assigned by AppendEvent
	At      time.Time // when it happened; AppendEvent sets the current time when zero
	Step    string    // e.g. "stop", "reap", "start", "ready", "bench"
	Status  string    // e.g. "started", "progress", "done", "failed"
	Message string
}

// AppendEvent adds e to its job's history with the next sequence number
// (e.Seq is ignored). A missing job gives ErrNotFound. Safe for concurrent
// use, also for one job from several goroutines or processes: sequence
// numbers never repeat or skip.
func (s *Store) AppendEvent(ctx context.Context, e Event) error {
	return s.appendEvent(ctx, e, false)
}

// AppendEventOnce is AppendEvent for trying again a write whose outcome is
// unknown (the store refused it, or its commit's answer was lost): e is
// not added when the job already has an event equal to it in every field,
// its time (which must be set) to the nanosecond. Trying it again is then
// harmless.
func (s *Store) AppendEventOnce(ctx context.Context, e Event) error {
	if e.At.IsZero() {
		return fmt.Errorf("append event to job %d once: %w: its time is not set", e.JobID, ErrInvalid)
	}
	return s.appendEvent(ctx, e, true)
}

func (s *Store) appendEvent(ctx context.Context, e Event, once bool) error {
	if e.JobID <= 0 {
		return fmt.Errorf("append event: %w: job id %d", ErrInvalid, e.JobID)
	}
	if err := checkTime("event time", e.At); err != nil {
		return fmt.Errorf("append event to job %d: %w", e.JobID, err)
	}
	at := orNow(e.At).UnixNano()
	q := `INSERT INTO job_events (job_id, seq, at, step, status, message)
			SELECT id, COALESCE((SELECT MAX(seq) FROM job_events WHERE job_id = jobs.id), 0) + 1, ?, ?, ?, ?
			FROM jobs WHERE id = ?`
	args := []any{at, e.Step, e.Status, e.Message, e.JobID}
	if once {
		q += ` AND NOT EXISTS (SELECT 1 FROM job_events x
			WHERE x.job_id = jobs.id AND x.at = ? AND x.step = ? AND x.status = ? AND x.message = ?)`
		args = append(args, at, e.Step, e.Status, e.Message)
	}
	err := s.write(ctx, func(tx *wtx) error {
		if s.dialect == postgresSQL {
			// Other processes may append to the job at once: its row lock
			// orders them, and the insert's snapshot, taken after the
			// lock, sees the last event.
			if _, err := tx.ExecContext(context.Background(), `SELECT 1 FROM jobs WHERE id = ? FOR UPDATE`, e.JobID); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(context.Background(), q, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 && once {
			return jobExists(tx, e.JobID) // there already, or no such job
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("append event to job %d: %w", e.JobID, err)
	}
	return nil
}

// Events returns the job's history in order. A missing job gives
// ErrNotFound; a job without events gives an empty slice.
func (s *Store) Events(ctx context.Context, jobID int64) ([]Event, error) {
	// One read transaction, so the existence check and the events agree.
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("read events of job %d: %w", jobID, err)
	}
	defer tx.Rollback()
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM jobs WHERE id = ?`, jobID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("events of job %d: %w", jobID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read events of job %d: %w", jobID, err)
	}
	evs, err := jobEvents(ctx, tx, jobID)
	if err != nil {
		return nil, fmt.Errorf("read events of job %d: %w", jobID, err)
	}
	return evs, nil
}

// jobEvents reads job jobID's events, oldest first, through q.
func jobEvents(ctx context.Context, q queryer, jobID int64) ([]Event, error) {
	rows, err := q.QueryContext(ctx, `SELECT seq, at, step, status, message FROM job_events WHERE job_id = ? ORDER BY seq`, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	evs := []Event{}
	for rows.Next() {
		e := Event{JobID: jobID}
		var at int64
		if err := rows.Scan(&e.Seq, &at, &e.Step, &e.Status, &e.Message); err != nil {
			return nil, err
		}
		e.At = time.Unix(0, at).UTC()
		evs = append(evs, e)
	}
	return evs, rows.Err()
}
