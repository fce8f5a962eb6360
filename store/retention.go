package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Pruned counts what Prune deleted.
type Pruned struct {
	Events int64 // job events of jobs that ended before the cutoff
	Audit  int64 // audit entries older than the cutoff
	// Firings are claimed schedule firings (schedule_firings rows) whose
	// time is before the cutoff: a schedule's FiredAt keeps an older
	// firing from being claimed again once its row is gone.
	Firings int64
}

// Prune deletes the events of jobs that ended before cutoff, the audit
// entries written before it (those before the first entry written at or
// after it: the chain loses its oldest entries and nothing between, see
// pruneAudit) and the claimed schedule firings before it, in
// one transaction: a nil error means all are gone, an error means nothing
// was deleted. Jobs themselves, their results
// and the benchmark history are kept (they are small, and `history` reads
// them). Nothing else may delete audit entries: the append-only trigger
// lets only this transaction through.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	if err := checkTime("prune cutoff", cutoff); err != nil {
		return Pruned{}, fmt.Errorf("prune store: %w", err)
	}
	c := cutoff.UnixNano()
	var p Pruned
	err := s.writeLong(ctx, func(tx *wtx) error {
		bg := context.Background()
		res, err := tx.ExecContext(bg, `DELETE FROM job_events WHERE job_id IN
			(SELECT id FROM jobs WHERE ended_at IS NOT NULL AND ended_at < ?)`, c)
		if err != nil {
			return fmt.Errorf("delete job events: %w", err)
		}
		if p.Events, err = res.RowsAffected(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(bg, `INSERT INTO kv (key, value, updated_at) VALUES ('prune.audit_before', ?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			strconv.FormatInt(c, 10), now().UnixNano()); err != nil {
			return fmt.Errorf("allow pruning the audit log: %w", err)
		}
		if p.Audit, err = pruneAudit(tx, c); err != nil {
			return err
		}
		if _, err := tx.ExecContext(bg, `DELETE FROM kv WHERE key = 'prune.audit_before'`); err != nil {
			return fmt.Errorf("close the audit log again: %w", err)
		}
		res, err = tx.ExecContext(bg, `DELETE FROM schedule_firings WHERE fire_at < ?`, c)
		if err != nil {
			return fmt.Errorf("delete schedule firings: %w", err)
		}
		p.Firings, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return Pruned{}, fmt.Errorf("prune store before %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	return p, nil
}

// pruneAudit deletes the audit entries before the first one written at or
// after cutoff c (all of them when none is), and makes the last chained
// entry it deletes the chain's anchor, so that the entries kept still
// verify (see auditchain.go). Entries are chained in the order they are
// written, and their times (set by the caller) may be out of that order by
// a little: an entry older than c that comes after a newer one is kept
// until a later prune. The ids are fixed from what this transaction reads
// first, so an entry another process chains meanwhile is never deleted.
func pruneAudit(tx *wtx, c int64) (int64, error) {
	bg := context.Background()
	var upto sql.NullInt64
	err := tx.QueryRowContext(bg, `SELECT COALESCE(
		(SELECT MIN(id) FROM audit_log WHERE at >= ?) - 1,
		(SELECT MAX(id) FROM audit_log))`, c).Scan(&upto)
	if err != nil {
		return 0, fmt.Errorf("find the audit entries to prune: %w", err)
	}
	if !upto.Valid {
		return 0, nil // no entries
	}
	var last chainLink
	err = tx.QueryRowContext(bg, `SELECT id, hash FROM audit_log WHERE id <= ? AND hash IS NOT NULL ORDER BY id DESC LIMIT 1`,
		upto.Int64).Scan(&last.Seq, &last.Hash)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Only entries from before the chain go: the anchor stays.
	case err != nil:
		return 0, fmt.Errorf("find the last audit entry to prune: %w", err)
	default:
		if _, err := tx.ExecContext(bg, `UPDATE audit_chain SET seq = ?, hash = ? WHERE name = 'anchor'`, last.Seq, last.Hash); err != nil {
			return 0, fmt.Errorf("move the audit chain's anchor: %w", err)
		}
	}
	res, err := tx.ExecContext(bg, `DELETE FROM audit_log WHERE id <= ?`, upto.Int64)
	if err != nil {
		return 0, fmt.Errorf("delete audit entries: %w", err)
	}
	return res.RowsAffected()
}

// Backup writes a consistent copy of the database at path (a store another
// process may be using right now) to dest, mode 0600, without changing the
// database: the copy is one read transaction's snapshot, written beside dest
// and renamed into place, so dest is either complete or absent. dest must
// not exist. It waits up to BusyTimeout for a writer that holds the file.
func Backup(ctx context.Context, path, dest string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("back up store %s: %w", path, err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("back up store to %s: %w", dest, os.ErrExist)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("back up store to %s: %w", dest, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("back up store %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-")
	if err != nil {
		return fmt.Errorf("back up store to %s: %w", dest, err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName)
	// A plain connection that only reads the store (VACUUM INTO writes the
	// copy, which query_only would refuse).
	u := url.URL{Scheme: "file", Path: abs}
	u.RawQuery = url.Values{"_pragma": {fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds())}}.Encode()
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return fmt.Errorf("back up store %s: %w", path, err)
	}
	defer db.Close()
	err = retryBusy(ctx, func() error {
		_, err := db.ExecContext(ctx, `VACUUM INTO ?`, tmpName)
		return err
	})
	if err != nil {
		return fmt.Errorf("back up store %s to %s: %w", path, dest, notStore(abs, err))
	}
	if err := os.Chmod(tmpName, 0o600); err != nil {
		return fmt.Errorf("back up store to %s: %w", dest, err)
	}
	if err := os.Link(tmpName, dest); err != nil {
		// A file system without hard links: rename instead (dest was absent above).
		if _, serr := os.Lstat(dest); !errors.Is(serr, os.ErrNotExist) {
			return fmt.Errorf("back up store to %s: %w", dest, err)
		}
		if err := os.Rename(tmpName, dest); err != nil {
			return fmt.Errorf("back up store to %s: %w", dest, err)
		}
	}
	return nil
}

// Ping checks that the store is open, takes writes (see WriteHealth) and
// answers a read: nil, or why not (ErrClosed after Close).
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.closing:
		return fmt.Errorf("store %s: %w", s.name, ErrClosed)
	default:
	}
	if err := s.WriteHealth(); err != nil {
		return err
	}
	var one int
	if err := s.rdb.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	return nil
}
