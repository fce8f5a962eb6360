package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// AuditEntry is one decision about one request: who asked what, where, and
// what the bot decided.
type AuditEntry struct {
	ID       int64
	At       time.Time // AppendAudit sets the current time when zero
	Platform string
	User     string // platform user id
	Room     string
	Command  string // the canonical command, or the raw text when it did not parse
	Decision string // "accepted", "refused", "confirmed", "cancelled", ...; required
	Detail   string // e.g. the role that was missing
	JobID    int64  // the job the decision started or concerns; 0 when none

	// The chain (see auditchain.go), set by the store: the hash of the
	// entry before this one, and this entry's own hash. Both "" for an
	// entry from before the chain.
	Prev, Hash string
}

// Common AuditEntry.Decision values.
const (
	DecisionAccepted  = "accepted"
	DecisionRefused   = "refused"
	DecisionConfirmed = "confirmed"
	DecisionCancelled = "cancelled"
	DecisionExpired   = "expired"
	DecisionInvalid   = "invalid"
)

// AppendAudit adds e to the audit log, chained after the last entry (see
// auditchain.go). The log is append-only: the store has no call that
// changes or deletes an entry but Prune, and the database itself refuses
// UPDATE and DELETE on it (triggers), whoever opens the file.
func (s *Store) AppendAudit(ctx context.Context, e AuditEntry) error {
	if err := checkAudit(e); err != nil {
		return fmt.Errorf("append audit: %w", err)
	}
	e.At = orNow(e.At)
	var err error
	if s.dialect == postgresSQL {
		err = s.writeAuto(ctx, func(tx *wtx) error { return insertAuditAuto(tx, e) })
	} else {
		err = s.write1(ctx, func(tx *wtx) error {
			if e.JobID != 0 {
				if err := jobExists(tx, e.JobID); err != nil {
					return err
				}
			}
			return insertAudit(tx, e)
		})
	}
	if err != nil {
		return fmt.Errorf("append audit %s %q by %s: %w", e.Decision, e.Command, e.User, err)
	}
	return nil
}

func checkAudit(e AuditEntry) error {
	switch {
	case strings.TrimSpace(e.Decision) == "":
		return fmt.Errorf("%w: the decision is empty", ErrInvalid)
	case e.ID != 0:
		return fmt.Errorf("%w: a new entry has no ID yet (got %d)", ErrInvalid, e.ID)
	case e.Prev != "" || e.Hash != "":
		return fmt.Errorf("%w: a new entry's chain is the store's to set", ErrInvalid)
	case e.JobID < 0:
		return fmt.Errorf("%w: negative job id %d", ErrInvalid, e.JobID)
	}
	return checkTime("audit time", e.At)
}

// insertAudit inserts e as the next entry of the chain: on SQLite the
// store chains it (insertAuditChained), on PostgreSQL the database's
// trigger does (migration 0012).
func insertAudit(tx *wtx, e AuditEntry) error {
	if tx.s.dialect == sqliteSQL {
		return insertAuditChained(tx, e)
	}
	_, err := tx.ExecContext(context.Background(), `INSERT INTO audit_log
		(at, platform, user_id, room, command, decision, detail, job_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		e.At.UnixNano(), e.Platform, e.User, e.Room, e.Command, e.Decision, e.Detail, nullID(e.JobID))
	return err
}

// insertAuditAuto is AppendAudit's one statement on PostgreSQL, in
// autocommit: the entry, when its job (if any) exists. The trigger chains
// it under the head row's lock, which the statement's commit releases in
// the same round trip (a transaction around it would hold the lock for
// one more: appenders of every process queue on it).
func insertAuditAuto(tx *wtx, e AuditEntry) error {
	res, err := tx.ExecContext(context.Background(), `INSERT INTO audit_log
		(at, platform, user_id, room, command, decision, detail, job_id)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE ?8 IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE id = ?8)`,
		e.At.UnixNano(), e.Platform, e.User, e.Room, e.Command, e.Decision, e.Detail, nullID(e.JobID))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("job %d: %w", e.JobID, ErrNotFound)
	}
	return nil
}

// CreateJobAudited records a new job and the audit entry that accepted it in
// one transaction: both or neither. The entry's JobID is set to the new
// job's ID (it must be 0 on input); its At defaults to the job's CreatedAt.
// Otherwise it is CreateJob followed by AppendAudit, at about the cost of
// one of them: the bot's acknowledgement path. (On PostgreSQL the calls
// made at once share statements, see acker; each still gets its own
// outcome.)
func (s *Store) CreateJobAudited(ctx context.Context, j Job, e AuditEntry) (Job, error) {
	j, e, err := s.jobAudited(j, e)
	if err != nil {
		return Job{}, err
	}
	if s.dialect == postgresSQL {
		// One statement, so one round trip in autocommit: the ack path.
		// Calls that queue together share one statement (see acker).
		a := &ackRows{j: j, e: e}
		if err := s.submit(ctx, ackOp(a)); err != nil {
			return Job{}, fmt.Errorf("create job %q: %w", j.Command, err)
		}
		j.ID = a.id
		return j, nil
	}
	err = s.write(ctx, func(tx *wtx) error {
		id, err := insertJob(tx, j)
		if err != nil {
			return err
		}
		e.JobID = id
		if err := insertAudit(tx, e); err != nil {
			return err
		}
		j.ID = id
		return nil
	})
	if err != nil {
		return Job{}, fmt.Errorf("create job %q: %w", j.Command, err)
	}
	return j, nil
}

// jobAudited checks a new job and its audit entry for CreateJobAudited and
// returns them with their defaults filled in (see jobDefaults; the entry's
// At, the job's CreatedAt when zero).
func (s *Store) jobAudited(j Job, e AuditEntry) (Job, AuditEntry, error) {
	if j.Status == "" {
		j.Status = Queued
	}
	if err := checkJob(j); err != nil {
		return Job{}, AuditEntry{}, fmt.Errorf("create job: %w", err)
	}
	if e.JobID != 0 {
		return Job{}, AuditEntry{}, fmt.Errorf("create job: audit entry: %w: JobID is set by CreateJobAudited (got %d)", ErrInvalid, e.JobID)
	}
	if err := checkAudit(e); err != nil {
		return Job{}, AuditEntry{}, fmt.Errorf("create job: audit entry: %w", err)
	}
	j = s.jobDefaults(j)
	if e.At.IsZero() {
		e.At = j.CreatedAt
	}
	e.At = e.At.UTC().Round(0)
	return j, e, nil
}

// AuditFilter selects audit entries. The zero value returns the newest 100.
type AuditFilter struct {
	User  string // only this user's entries; "" for all
	Limit int    // at most this many; <= 0 means 100
}

// Audit returns the entries f selects, newest first.
func (s *Store) Audit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	q := `SELECT id, at, platform, user_id, room, command, decision, detail, job_id FROM audit_log`
	var args []any
	if f.User != "" {
		q += ` WHERE user_id = ?`
		args = append(args, f.User)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limitOr(f.Limit, 100))
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var job sql.NullInt64
		if err := rows.Scan(&e.ID, &at, &e.Platform, &e.User, &e.Room, &e.Command, &e.Decision, &e.Detail, &job); err != nil {
			return nil, fmt.Errorf("read audit log: %w", err)
		}
		e.At = time.Unix(0, at).UTC()
		e.JobID = job.Int64
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}
