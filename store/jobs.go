package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Status is a job's state. A job starts queued (or is recorded directly in a
// final state, e.g. refused), becomes running, and ends in one of the final
// states; a final state never changes.
type Status string

// The job states.
const (
	Queued      Status = "queued"
	Running     Status = "running"
	Succeeded   Status = "succeeded"
	Failed      Status = "failed"
	Cancelled   Status = "cancelled"
	Refused     Status = "refused"
	Interrupted Status = "interrupted" // the bot stopped (crash, restart) while the job was queued or running
)

// Final reports whether s is an end state.
func (s Status) Final() bool {
	switch s {
	case Succeeded, Failed, Cancelled, Refused, Interrupted:
		return true
	}
	return false
}

// Valid reports whether s is one of the job states.
func (s Status) Valid() bool { return s == Queued || s == Running || s.Final() }

// Job is one command's run.
type Job struct {
	ID         int64
	Command    string // canonical command text
	Platform   string // "slack", "matrix", "console", "schedule", ...
	User       string // platform user id
	Room       string // channel / room id
	Thread     string // the platform's id of the job's status message / thread
	Service    string
	Host       string
	Status     Status
	Error      string          // why it failed, was refused, cancelled or interrupted
	Result     json.RawMessage // the pipeline's result, JSON; nil when none; while running, its last checkpoint (SetJobProgress)
	ScheduleID int64           // the schedule that started it; 0 when none
	CreatedAt  time.Time
	StartedAt  time.Time // zero until running
	EndedAt    time.Time // zero until final

	// Owner is the opsbot process (Owner.ID) that runs the job; "" for a
	// job recorded before any owner was registered.
	Owner string
	// RecordedLate: the outcome was recorded by the process that ran the
	// job after it had lost the job's lease and another process had marked
	// the job interrupted (see FinishJobLate).
	RecordedLate bool

	// Args is the job's typed command as the command language encodes it:
	// versioned JSON such as {"v":1,"command":"mtp steps","args":{...}}.
	// The store keeps it as opaque JSON text: it must be valid JSON, and
	// nothing in the store reads inside it. nil when unknown (the jobs
	// recorded before it was kept).
	Args json.RawMessage
	// DryRun: the job is a --dry-run, which changed nothing. Set when the
	// job is recorded; never changes. (For the jobs recorded before the
	// flag was kept, migration 0011 set it once from the command text.)
	DryRun bool
}

// InterruptedMessage is the Error that InterruptUnfinished gives the jobs it
// ends.
const InterruptedMessage = "interrupted: opsbot stopped before the job finished"

const jobColumns = `id, command, platform, user_id, room, thread, service, host, status, error, result, schedule_id, created_at, started_at, ended_at, owner, recorded_late, args, dry_run`

// CreateJob records a new job and returns it with ID set (and CreatedAt, when
// it was zero). Status defaults to Queued; a job may also be recorded in a
// final state (a refused request), which sets EndedAt to CreatedAt when
// zero, or as Running, which sets StartedAt. Command is required and Result
// and Args, when set, must be valid JSON; otherwise the error wraps
// ErrInvalid and nothing is written. Args and DryRun are kept as given. A
// job without an Owner that is not final gets the owner registered with
// RegisterOwner, if any. Safe for concurrent use; see write for what ctx
// does.
func (s *Store) CreateJob(ctx context.Context, j Job) (Job, error) {
	if j.Status == "" {
		j.Status = Queued
	}
	if err := checkJob(j); err != nil {
		return Job{}, fmt.Errorf("create job: %w", err)
	}
	j = s.jobDefaults(j)
	err := s.writeAuto(ctx, func(tx *wtx) error {
		var err error
		j.ID, err = insertJob(tx, j)
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("create job %q: %w", j.Command, err)
	}
	return j, nil
}

// jobDefaults fills in the times a new job gets, and its owner: the one
// registered with RegisterOwner, for a job that is not final.
func (s *Store) jobDefaults(j Job) Job {
	if j.Owner == "" && !j.Status.Final() {
		j.Owner = s.currentOwner()
	}
	j.CreatedAt = orNow(j.CreatedAt)
	j.StartedAt = j.StartedAt.UTC().Round(0)
	j.EndedAt = j.EndedAt.UTC().Round(0)
	if j.Status == Running && j.StartedAt.IsZero() {
		j.StartedAt = j.CreatedAt
	}
	if j.Status.Final() && j.EndedAt.IsZero() {
		j.EndedAt = j.CreatedAt
	}
	return j
}

func insertJob(tx *wtx, j Job) (int64, error) {
	var id int64
	err := tx.QueryRowContext(context.Background(), `INSERT INTO jobs
		(command, platform, user_id, room, thread, service, host, status, error, result, schedule_id, created_at, started_at, ended_at, owner, args, dry_run)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		j.Command, j.Platform, j.User, j.Room, j.Thread, j.Service, j.Host, string(j.Status), j.Error,
		nullJSON(j.Result), nullID(j.ScheduleID), j.CreatedAt.UnixNano(), nanos(j.StartedAt), nanos(j.EndedAt), j.Owner,
		nullJSON(j.Args), flag(j.DryRun)).Scan(&id)
	return id, err
}

// jobExists returns ErrNotFound (wrapped) unless job id exists.
func jobExists(tx *wtx, id int64) error {
	var one int
	err := tx.QueryRowContext(context.Background(), `SELECT 1 FROM jobs WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	return err
}

func checkJob(j Job) error {
	switch {
	case strings.TrimSpace(j.Command) == "":
		return fmt.Errorf("%w: the command is empty", ErrInvalid)
	case !j.Status.Valid():
		return fmt.Errorf("%w: unknown status %q", ErrInvalid, j.Status)
	case j.ScheduleID < 0:
		return fmt.Errorf("%w: negative schedule id %d", ErrInvalid, j.ScheduleID)
	case j.ID != 0:
		return fmt.Errorf("%w: a new job has no ID yet (got %d)", ErrInvalid, j.ID)
	}
	if err := checkJSON("result", j.Result); err != nil {
		return err
	}
	if err := checkJSON("args", j.Args); err != nil {
		return err
	}
	for _, t := range []struct {
		what string
		t    time.Time
	}{{"created_at", j.CreatedAt}, {"started_at", j.StartedAt}, {"ended_at", j.EndedAt}} {
		if err := checkTime(t.what, t.t); err != nil {
			return err
		}
	}
	return nil
}

func checkJSON(what string, raw json.RawMessage) error {
	if len(raw) > 0 && !json.Valid(raw) {
		return fmt.Errorf("%w: %s is not valid JSON", ErrInvalid, what)
	}
	return nil
}

func nullJSON(raw json.RawMessage) sql.NullString {
	if len(raw) == 0 {
		return sql.NullString{}
	}
	return sql.NullString{String: string(raw), Valid: true}
}

// flag is b as the store keeps its flags in both databases: 1 or 0.
func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func nullID(id int64) sql.NullInt64 {
	if id == 0 {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: id, Valid: true}
}

// StartJob moves a queued job to running and sets StartedAt. A job in any
// other state is left alone and the error is a *TransitionError; a missing
// job gives ErrNotFound.
func (s *Store) StartJob(ctx context.Context, id int64) error {
	err := s.write1(ctx, func(tx *wtx) error {
		return transition(tx, id, Running, []Status{Queued}, func() (sql.Result, error) {
			return tx.ExecContext(context.Background(),
				`UPDATE jobs SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'`,
				now().UnixNano(), id)
		})
	})
	if err != nil {
		return fmt.Errorf("start job %d: %w", id, err)
	}
	return nil
}

// FinishJob moves a queued or running job to the final state st, with
// errText (why it did not succeed; may be empty) and result (JSON, may be
// nil), and sets EndedAt to now. A job already final is left alone and the
// error is a *TransitionError; a missing job gives ErrNotFound; st not final
// or result not JSON gives ErrInvalid.
func (s *Store) FinishJob(ctx context.Context, id int64, st Status, errText string, result json.RawMessage) error {
	e := Ending{Status: st, Error: errText, Result: result}
	if err := e.check(); err != nil {
		return fmt.Errorf("finish job %d: %w", id, err)
	}
	err := s.write1(ctx, func(tx *wtx) error { return endRunning(tx, id, e, now()) })
	if err != nil {
		return fmt.Errorf("finish job %d as %s: %w", id, st, err)
	}
	return nil
}

// SetJobProgress records progress (JSON) as the result of running job id
// so far: a pipeline's checkpoint (a rollout's record of the replicas it
// changed and their previous units), kept as the job's Result until the
// job ends, when its final result (or none) replaces it. A job the store
// then records interrupted (InterruptUnfinished) keeps it, so that the
// process taking it over reads how far it got. Only a running job is
// changed: another state gives a *TransitionError (the job was taken over
// meanwhile), a missing job ErrNotFound, progress not JSON ErrInvalid.
// It returns once the write is committed.
func (s *Store) SetJobProgress(ctx context.Context, id int64, progress json.RawMessage) error {
	if !json.Valid(progress) {
		return fmt.Errorf("record the progress of job %d: %w: not JSON", id, ErrInvalid)
	}
	err := s.write1(ctx, func(tx *wtx) error {
		return transition(tx, id, Running, []Status{Running}, func() (sql.Result, error) {
			return tx.ExecContext(context.Background(), `UPDATE jobs SET result = ? WHERE id = ? AND status = 'running'`, string(progress), id)
		})
	})
	if err != nil {
		return fmt.Errorf("record the progress of job %d: %w", id, err)
	}
	return nil
}

// FinishJobLate records the real outcome of a job that another process
// marked interrupted while this one, which ran it, had lost its lease (a
// pause, a stalled heartbeat): st, errText and result replace the
// interruption, the job is marked RecordedLate, and its status message is
// due for an edit again (see UnshownFinals). Only a job now Interrupted is
// changed; otherwise the error is a *TransitionError.
func (s *Store) FinishJobLate(ctx context.Context, id int64, st Status, errText string, result json.RawMessage) error {
	e := Ending{Status: st, Error: errText, Result: result}
	if err := e.check(); err != nil {
		return fmt.Errorf("finish job %d late: %w", id, err)
	}
	err := s.write1(ctx, func(tx *wtx) error { return endInterrupted(tx, id, e, now()) })
	if err != nil {
		return fmt.Errorf("finish job %d late as %s: %w", id, st, err)
	}
	return nil
}

// Ending is a job's final state as the process that ran it saw the job
// end. That process keeps it while the store refuses writes and records it
// with EndJob once the store takes them: At is when the job ended on its
// host, not when the write landed.
type Ending struct {
	Status Status          // a final state
	Error  string          // why it did not succeed; "" when it did
	Result json.RawMessage // the pipeline's result, JSON; nil when none
	At     time.Time       // when the job ended; zero: now
}

func (e Ending) check() error {
	if !e.Status.Final() {
		return fmt.Errorf("%w: %q is not a final status", ErrInvalid, e.Status)
	}
	if err := checkJSON("result", e.Result); err != nil {
		return err
	}
	return checkTime("ended_at", e.At)
}

// EndJob records e as job id's final state, EndedAt e.At: a queued or
// running job moves to it (FinishJob); a job another process marked
// Interrupted meanwhile (this one had lost its lease) gets it as its real
// outcome, marked RecordedLate (FinishJobLate), and late is true. Both in
// one write. Recording the same e again (a retry after its commit's answer
// was lost) changes nothing and succeeds. A job in another final state is
// left alone and the error is a *TransitionError; a missing job gives
// ErrNotFound; a bad e, ErrInvalid.
func (s *Store) EndJob(ctx context.Context, id int64, e Ending) (late bool, err error) {
	if err := e.check(); err != nil {
		return false, fmt.Errorf("end job %d: %w", id, err)
	}
	at := orNow(e.At)
	// (At most one of its statements changes the database: write1.)
	err = s.write1(ctx, func(tx *wtx) error {
		late = false
		err := endRunning(tx, id, e, at)
		var te *TransitionError
		switch {
		case !errors.As(err, &te):
			return err
		case te.From == Interrupted:
			late = true
			return endInterrupted(tx, id, e, at)
		case te.From == e.Status:
			return endedAs(tx, id, e, at, err)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("end job %d as %s: %w", id, e.Status, err)
	}
	return late, nil
}

// endedAs returns nil when job id already ended as e, at at (an EndJob
// tried again after its commit's answer was lost), else err.
func endedAs(tx *wtx, id int64, e Ending, at time.Time, err error) error {
	var errText string
	var ended sql.NullInt64
	if qErr := tx.QueryRowContext(context.Background(), `SELECT error, ended_at FROM jobs WHERE id = ?`, id).Scan(&errText, &ended); qErr != nil {
		return qErr
	}
	if errText == e.Error && ended.Int64 == at.UnixNano() {
		return nil
	}
	return err
}

// endRunning moves job id from queued or running to e, ended at at.
func endRunning(tx *wtx, id int64, e Ending, at time.Time) error {
	return transition(tx, id, e.Status, []Status{Queued, Running}, func() (sql.Result, error) {
		return tx.ExecContext(context.Background(),
			`UPDATE jobs SET status = ?, error = ?, result = ?, ended_at = ? WHERE id = ? AND status IN ('queued', 'running')`,
			string(e.Status), e.Error, nullJSON(e.Result), at.UnixNano(), id)
	})
}

// endInterrupted replaces job id's interruption with e, ended at at,
// marked late and due for a final edit again.
func endInterrupted(tx *wtx, id int64, e Ending, at time.Time) error {
	return transition(tx, id, e.Status, []Status{Interrupted}, func() (sql.Result, error) {
		return tx.ExecContext(context.Background(),
			`UPDATE jobs SET status = ?, error = ?, result = ?, ended_at = ?, recorded_late = 1, final_shown = 0
			 WHERE id = ? AND status = 'interrupted'`,
			string(e.Status), e.Error, nullJSON(e.Result), at.UnixNano(), id)
	})
}

// UnshownFinals returns, oldest first, up to limit final jobs of the given
// platforms whose status message (Thread) does not show their final state
// yet. Whoever edits one claims it first with ClaimFinalShown.
func (s *Store) UnshownFinals(ctx context.Context, platforms []string, limit int) ([]Job, error) {
	if len(platforms) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(platforms)+1)
	marks := make([]string, len(platforms))
	for i, p := range platforms {
		marks[i] = "?"
		args = append(args, p)
	}
	args = append(args, max(limit, 1))
	jobs, err := queryJobs(ctx, s.rdb, `SELECT `+jobColumns+` FROM jobs
		WHERE final_shown = 0 AND thread <> '' AND status IN ('succeeded', 'failed', 'cancelled', 'refused', 'interrupted')
		  AND platform IN (`+strings.Join(marks, ", ")+`)
		ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("jobs whose final state is not shown: %w", err)
	}
	return jobs, nil
}

// ClaimFinalShown claims the edit that shows job id's final state on its
// status message, and reports whether this call claimed it (false: the job
// is not final, or another process made or makes that edit). An edit that
// failed gives its claim back with ReleaseFinalShown.
func (s *Store) ClaimFinalShown(ctx context.Context, id int64) (bool, error) {
	var claimed bool
	err := s.write1(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(context.Background(), `UPDATE jobs SET final_shown = 1
			WHERE id = ? AND final_shown = 0 AND status IN ('succeeded', 'failed', 'cancelled', 'refused', 'interrupted')`, id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		claimed = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("claim the final edit of job %d: %w", id, err)
	}
	return claimed, nil
}

// ReleaseFinalShown gives back a claim of ClaimFinalShown whose edit failed,
// so that it is tried again.
func (s *Store) ReleaseFinalShown(ctx context.Context, id int64) error {
	err := s.write1(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(context.Background(), `UPDATE jobs SET final_shown = 0 WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("release the final edit of job %d: %w", id, err)
	}
	return nil
}

// transition runs update, which changes job id only if it is in one of from,
// and explains a change that did not happen.
func transition(tx *wtx, id int64, to Status, from []Status, update func() (sql.Result, error)) error {
	res, err := update()
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 1 {
		return nil
	}
	var cur string
	err = tx.QueryRowContext(context.Background(), `SELECT status FROM jobs WHERE id = ?`, id).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return &TransitionError{JobID: id, From: Status(cur), To: to}
}

// SetJobThread records the platform's id of the job's status message or
// thread. Allowed in any state; a missing job gives ErrNotFound.
func (s *Store) SetJobThread(ctx context.Context, id int64, thread string) error {
	err := s.write1(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(context.Background(), `UPDATE jobs SET thread = ? WHERE id = ?`, thread, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set thread of job %d: %w", id, err)
	}
	return nil
}

// Job returns the job with this id, or an error wrapping ErrNotFound.
func (s *Store) Job(ctx context.Context, id int64) (Job, error) {
	row := s.rdb.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id)
	j, err := scanJob(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("read job %d: %w", id, err)
	}
	return j, nil
}

// JobFilter selects jobs for ListJobs. The zero value lists the newest 100
// jobs of every service and state.
type JobFilter struct {
	Active  bool   // only queued and running jobs
	Service string // only this service's jobs; "" for all
	User    string // only this user's jobs; "" for all
	Limit   int    // at most this many; <= 0 means 100
}

// ListJobs returns the jobs f selects, newest first.
func (s *Store) ListJobs(ctx context.Context, f JobFilter) ([]Job, error) {
	where, args := f.where()
	q := `SELECT ` + jobColumns + ` FROM jobs` + where + ` ORDER BY id DESC LIMIT ?`
	args = append(args, limitOr(f.Limit, 100))
	jobs, err := queryJobs(ctx, s.rdb, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// CountJobs returns how many jobs f selects, whatever its Limit: with
// ListJobs, how many a list left out.
func (s *Store) CountJobs(ctx context.Context, f JobFilter) (int, error) {
	where, args := f.where()
	var n int
	if err := s.rdb.QueryRowContext(ctx, `SELECT COUNT(*) FROM jobs`+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// where is f's WHERE clause (" WHERE ...", or "" for every job) and its
// arguments; the Limit is left to the caller.
func (f JobFilter) where() (string, []any) {
	var where []string
	var args []any
	if f.Active {
		where = append(where, `status IN ('queued', 'running')`)
	}
	if f.Service != "" {
		where = append(where, `service = ?`)
		args = append(args, f.Service)
	}
	if f.User != "" {
		where = append(where, `user_id = ?`)
		args = append(args, f.User)
	}
	if len(where) == 0 {
		return "", args
	}
	return ` WHERE ` + strings.Join(where, ` AND `), args
}

// InterruptUnfinished ends as Interrupted every queued or running job
// whose owner is dead: not registered, or past its expiry (see
// RegisterOwner and Heartbeat); a job without an owner counts as a dead
// owner's. Its Error is why(job, its events oldest first), what the store
// knows of how far it got; InterruptedMessage when why is nil. why runs
// inside the write and must be quick. It returns those jobs as they are
// now, oldest first. Jobs of live owners (other processes on the same
// file, and this one) are left alone, so the bot calls it at start-up and
// again from time to time: jobs left unfinished by a crash or restart are
// then reported instead of staying "running" forever.
func (s *Store) InterruptUnfinished(ctx context.Context, why func(j Job, evs []Event) string) ([]Job, error) {
	var jobs []Job
	err := s.write(ctx, func(tx *wtx) error {
		jobs = nil
		tt, err := tx.now()
		if err != nil {
			return err
		}
		t := tt.UnixNano()
		const dead = `status IN ('queued', 'running')
			  AND NOT EXISTS (SELECT 1 FROM owners o WHERE o.id = jobs.owner AND o.expires_at > ?)`
		found, err := queryJobs(context.Background(), tx, `SELECT `+jobColumns+` FROM jobs WHERE `+dead+` ORDER BY id`, t)
		if err != nil {
			return err
		}
		for _, j := range found {
			text := InterruptedMessage
			if why != nil {
				evs, err := jobEvents(context.Background(), tx, j.ID)
				if err != nil {
					return err
				}
				text = why(j, evs)
			}
			// Another process may have ended it meanwhile: the
			// condition is checked again, row by row.
			res, err := tx.ExecContext(context.Background(), `UPDATE jobs SET status = 'interrupted', error = ?, ended_at = ?
				WHERE id = ? AND `+dead, text, t, j.ID, t)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				j.Status, j.Error, j.EndedAt = Interrupted, text, time.Unix(0, t).UTC()
				jobs = append(jobs, j)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("interrupt unfinished jobs: %w", err)
	}
	return jobs, nil
}

type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

type scanner interface {
	Scan(dest ...any) error
}

func queryJobs(ctx context.Context, q queryer, query string, args ...any) ([]Job, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

func scanJob(sc scanner) (Job, error) {
	var j Job
	var status string
	var result, args sql.NullString
	var sched, created, started, ended sql.NullInt64
	if err := sc.Scan(&j.ID, &j.Command, &j.Platform, &j.User, &j.Room, &j.Thread, &j.Service, &j.Host,
		&status, &j.Error, &result, &sched, &created, &started, &ended, &j.Owner, &j.RecordedLate,
		&args, &j.DryRun); err != nil {
		return Job{}, err
	}
	j.Status = Status(status)
	if result.Valid {
		j.Result = json.RawMessage(result.String)
	}
	if args.Valid {
		j.Args = json.RawMessage(args.String)
	}
	j.ScheduleID = sched.Int64
	j.CreatedAt = fromNanos(created)
	j.StartedAt = fromNanos(started)
	j.EndedAt = fromNanos(ended)
	return j, nil
}
