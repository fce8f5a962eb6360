package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// FinishedJobs returns the jobs of service that ended in a final status
// other than refused (succeeded, failed, cancelled, interrupted), have a
// result (Result not nil), and are not dry runs (DryRun false), newest
// first, at most limit (<= 0: 50). With beforeID > 0 only the jobs with an
// id below beforeID are returned, so a caller pages back through a
// service's history by passing the smallest id of the page before; a page
// shorter than limit is the last. The store does not look inside results or
// commands: which of these jobs changed what (a unit, a file) is the
// caller's to decide.
func (s *Store) FinishedJobs(ctx context.Context, service string, beforeID int64, limit int) ([]Job, error) {
	q, args := finishedJobsQuery(service, beforeID, limit)
	jobs, err := queryJobs(ctx, s.rdb, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read the finished jobs of %s: %w", service, err)
	}
	return jobs, nil
}

// finishedJobsQuery is FinishedJobs' statement and its arguments. service
// = ? AND id < ? ORDER BY id DESC LIMIT ?: an index walk, newest first,
// from beforeID, that stops after limit matches and sorts nothing (SQLite
// walks jobs_service (service, id); PostgreSQL walks that or, for a service
// with most of the jobs, the primary key).
func finishedJobsQuery(service string, beforeID int64, limit int) (string, []any) {
	q := `SELECT ` + jobColumns + ` FROM jobs WHERE service = ?`
	args := []any{service}
	if beforeID > 0 {
		q += ` AND id < ?`
		args = append(args, beforeID)
	}
	q += ` AND status IN ('succeeded', 'failed', 'cancelled', 'interrupted') AND result IS NOT NULL AND dry_run = 0
		ORDER BY id DESC LIMIT ?`
	return q, append(args, limitOr(limit, 50))
}

// JobAudit returns the audit entries about job id (who it was accepted,
// confirmed or cancelled by), oldest first.
func (s *Store) JobAudit(ctx context.Context, id int64) ([]AuditEntry, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, at, platform, user_id, room, command, decision, detail, job_id
		FROM audit_log WHERE job_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("read the audit entries of job %d: %w", id, err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var job sql.NullInt64
		if err := rows.Scan(&e.ID, &at, &e.Platform, &e.User, &e.Room, &e.Command, &e.Decision, &e.Detail, &job); err != nil {
			return nil, fmt.Errorf("read the audit entries of job %d: %w", id, err)
		}
		e.At = time.Unix(0, at).UTC()
		e.JobID = job.Int64
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the audit entries of job %d: %w", id, err)
	}
	return out, nil
}
