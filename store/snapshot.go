package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// reader runs the store's queries (with its placeholders) on one view of a
// database: a Store's read pool (*db), or one read transaction (*snapshot).
type reader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// snapshot is one read transaction on a store: every read through it sees
// the database as it was at the transaction's first read (a
// repeatable-read transaction on PostgreSQL; on SQLite a read transaction,
// whose WAL snapshot holds until it ends), whatever is written meanwhile.
type snapshot struct {
	tx *sql.Tx
	d  dialect
}

func (r *snapshot) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return r.tx.QueryContext(ctx, r.d.rebind(query), r.d.args(args)...)
}

func (r *snapshot) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return r.tx.QueryRowContext(ctx, r.d.rebind(query), r.d.args(args)...)
}

// snapshot begins a read transaction on s and takes its snapshot at once;
// it returns the time of the cut by s's clock (the database's on
// PostgreSQL, read inside the transaction, so the snapshot is no later than
// it). Its statements are not bounded by StatementTimeout: a copy reads
// whole tables. End it with the returned function.
func (s *Store) snapshot(ctx context.Context) (*snapshot, time.Time, func(), error) {
	var opts *sql.TxOptions
	if s.dialect == postgresSQL {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := s.rdb.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("begin a read transaction on %s: %w", s.name, err)
	}
	end := func() { _ = tx.Rollback() }
	r := &snapshot{tx: tx, d: s.dialect}
	var cut time.Time
	if s.dialect == postgresSQL {
		var us int64
		err = r.QueryRowContext(ctx, clockNow).Scan(&us)
		cut = time.UnixMicro(us).UTC()
	} else {
		var n int64
		err = r.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n)
		cut = now()
	}
	if err != nil {
		end()
		return nil, time.Time{}, nil, fmt.Errorf("take a snapshot of %s: %w", s.name, err)
	}
	return r, cut, end, nil
}

// LiveSourceError is Copy's error for a source in use: live opsbot
// processes hold leases on it (unexpired, their owner live), or are
// registered on it without one, at the cut. Nothing was written.
type LiveSourceError struct {
	Store  string  // the source, as Store.Name says it
	Leases []Lease // held by live processes
	Owners []Owner // live processes that hold no lease
}

func (e *LiveSourceError) Error() string {
	var parts []string
	for _, l := range e.Leases {
		parts = append(parts, fmt.Sprintf("lease %s held by %s until %s", l.Key, l.Holder(), stamp(l.ExpiresAt)))
	}
	for _, o := range e.Owners {
		parts = append(parts, fmt.Sprintf("opsbot on %s (pid %d) live until %s, holding no lease", o.Host, o.PID, stamp(o.ExpiresAt)))
	}
	return fmt.Sprintf("the source store %s is in use by live opsbot processes: %s", e.Store, strings.Join(parts, "; "))
}

// ErrSourceLive is wrapped by a *LiveSourceError (errors.Is).
var ErrSourceLive = errors.New("the source store is in use")

func (e *LiveSourceError) Unwrap() error { return ErrSourceLive }

// stamp writes t for a person: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// liveAt returns the leases held by live processes at t in r (unexpired,
// their owner unexpired), by key, and the live processes that hold none.
func liveAt(ctx context.Context, r reader, t time.Time) ([]Lease, []Owner, error) {
	rows, err := r.QueryContext(ctx, `SELECT l.key, l.owner, l.job_id, l.acquired_at, l.expires_at, o.host, o.pid
		FROM leases l JOIN owners o ON o.id = l.owner
		WHERE l.expires_at > ?1 AND o.expires_at > ?1 ORDER BY l.key`, t.UnixNano())
	if err != nil {
		return nil, nil, fmt.Errorf("read the leases: %w", err)
	}
	var leases []Lease
	for rows.Next() {
		var l Lease
		var acq, exp int64
		if err := rows.Scan(&l.Key, &l.Owner, &l.JobID, &acq, &exp, &l.OwnerHost, &l.OwnerPID); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("read the leases: %w", err)
		}
		l.AcquiredAt, l.ExpiresAt = time.Unix(0, acq).UTC(), time.Unix(0, exp).UTC()
		leases = append(leases, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read the leases: %w", err)
	}
	owners, err := idleOwnersAt(ctx, r, t)
	return leases, owners, err
}

// idleOwnersAt returns the processes live at t in r that hold no live lease.
func idleOwnersAt(ctx context.Context, r reader, t time.Time) ([]Owner, error) {
	rows, err := r.QueryContext(ctx, `SELECT o.id, o.host, o.pid, o.expires_at FROM owners o
		WHERE o.expires_at > ?1 AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.owner = o.id AND l.expires_at > ?1)
		ORDER BY o.started_at, o.id`, t.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("read the opsbot processes: %w", err)
	}
	defer rows.Close()
	var out []Owner
	for rows.Next() {
		var o Owner
		var exp int64
		if err := rows.Scan(&o.ID, &o.Host, &o.PID, &exp); err != nil {
			return nil, fmt.Errorf("read the opsbot processes: %w", err)
		}
		o.ExpiresAt = time.Unix(0, exp).UTC()
		out = append(out, o)
	}
	return out, rows.Err()
}
