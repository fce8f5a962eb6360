package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// UnitChangeJobs returns the finished jobs of service whose result records a
// unit change: a "unit" object whose "before" and "after" differ, or whose
// "files" (written beside the unit, e.g. SGLang's adaptive config) hold one
// that changed ("before" and "after" differ, or "created" or "removed"
// true), so a change of the file alone counts. Newest first, at most limit
// (<= 0: 50). Dry runs (a canonical command with --dry-run) are left out:
// they changed nothing.
func (s *Store) UnitChangeJobs(ctx context.Context, service string, limit int) ([]Job, error) {
	changed := s.dialect.pick(`json_extract(result, '$.unit.after') IS NOT NULL
		AND (json_extract(result, '$.unit.before') IS NOT json_extract(result, '$.unit.after')
			OR EXISTS (SELECT 1 FROM json_each(result, '$.unit.files') f
				WHERE json_extract(f.value, '$.before') IS NOT json_extract(f.value, '$.after')
				OR json_extract(f.value, '$.created') = 1 OR json_extract(f.value, '$.removed') = 1))`,
		`(result::jsonb #>> '{unit,after}') IS NOT NULL
		AND ((result::jsonb #>> '{unit,before}') IS DISTINCT FROM (result::jsonb #>> '{unit,after}')
			OR EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(result::jsonb #> '{unit,files}') = 'array'
					THEN result::jsonb #> '{unit,files}' ELSE '[]'::jsonb END) f
				WHERE (f #>> '{before}') IS DISTINCT FROM (f #>> '{after}')
				OR (f #>> '{created}') = 'true' OR (f #>> '{removed}') = 'true'))`)
	jobs, err := queryJobs(ctx, s.rdb, `SELECT `+jobColumns+` FROM jobs
		WHERE service = ? AND status IN ('succeeded', 'failed', 'cancelled', 'interrupted') AND result IS NOT NULL
		AND `+changed+`
		AND ' ' || command || ' ' NOT LIKE '% --dry-run %'
		ORDER BY id DESC LIMIT ?`, service, limitOr(limit, 50))
	if err != nil {
		return nil, fmt.Errorf("read the unit changes of %s: %w", service, err)
	}
	return jobs, nil
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
