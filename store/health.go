package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrRefusingWrites is wrapped by WriteHealth's error while the database
// refuses writes.
var ErrRefusingWrites = errors.New("the store refuses writes")

// writeHealth tracks whether the database refuses writes: a full disk or
// filesystem, a read-only file, an I/O error; on PostgreSQL, a database
// that cannot be reached, does not answer within StatementTimeout, is
// shutting down, read-only or out of space.
type writeHealth struct {
	errors atomic.Int64 // writes that failed because the database refused them

	mu      sync.Mutex
	since   time.Time // zero while writes succeed
	lastAt  time.Time // the last refusal
	last    error
	settled time.Duration
}

// refusalSettles is how long after its last refused write a store counts
// as taking writes again once one succeeds: on a full disk some writes
// still fit (an update in place) while others do not.
const refusalSettles = 5 * time.Second

// refusal reports whether err says the database cannot take writes at all
// (as opposed to one write's own problem: a constraint, a missing row).
func refusal(err error) bool {
	if err == nil {
		return false
	}
	if pgRefusal(err) {
		return true
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_PERM:
		return true
	}
	return false
}

// note records the outcome of one write.
func (h *writeHealth) note(err error) {
	switch {
	case err == nil:
		h.mu.Lock()
		if !h.since.IsZero() && time.Since(h.lastAt) >= h.settled {
			h.since, h.last = time.Time{}, nil
		}
		h.mu.Unlock()
	case refusal(err):
		h.errors.Add(1)
		h.mu.Lock()
		if h.since.IsZero() {
			h.since = time.Now()
		}
		h.last, h.lastAt = err, time.Now()
		h.mu.Unlock()
	}
}

// WriteHealth returns nil while the store takes writes; while its database
// refuses them (a write failed so: a full disk, a read-only file, an I/O
// error; until a write succeeds 5 s or more after the last refusal), an error wrapping ErrRefusingWrites that says since when and
// why. /readyz reports it.
func (s *Store) WriteHealth() error {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	if s.health.since.IsZero() {
		return nil
	}
	return fmt.Errorf("store %s: %w since %s: %v", s.name, ErrRefusingWrites, s.health.since.UTC().Format("15:04:05"), s.health.last)
}

// WriteErrors counts the writes the database refused since Open.
func (s *Store) WriteErrors() int64 { return s.health.errors.Load() }

// IsRefusingWrites reports whether err is a write the database refused as a
// whole (see WriteHealth), so the caller keeps what it wanted to record and
// tries again later.
func IsRefusingWrites(err error) bool { return refusal(err) }

// LimitSize caps the database at its current size plus extra pages
// (SQLite's max_page_count), so that writes beyond fail as on a full disk:
// for tests and fire drills of what opsbot does when its store fills up.
// extra < 0 removes the cap.
func (s *Store) LimitSize(ctx context.Context, extra int) error {
	if extra < 0 {
		// A batch that this call shares with a write the full store refuses is rolled back as a
		// whole: removing the cap tries again (a disk that is really full refuses every try).
		for try := 1; ; try++ {
			err := s.limitSize(ctx, extra)
			if !refusal(err) || ctx.Err() != nil || try == 100 {
				return err
			}
		}
	}
	return s.limitSize(ctx, extra)
}

// RefuseWrites makes the store refuse every write as a read-only database
// does (SQLite's query_only, on its one write connection), or, with on
// false, take them again; reads go on. For tests and fire drills of what
// opsbot does when its store refuses writes. SQLite only.
func (s *Store) RefuseWrites(ctx context.Context, on bool) error {
	if s.dialect != sqliteSQL {
		return fmt.Errorf("refuse writes: %w: store %s is not SQLite", ErrInvalid, s.name)
	}
	pragma := fmt.Sprintf("PRAGMA query_only = %d", flag(on))
	// Not in a transaction: a write transaction cannot begin while
	// query_only is on, not even the one that would turn it off.
	return s.submit(ctx, &writeOp{bare: true, fn: func(tx *wtx) error {
		_, err := tx.s.wdb.ExecContext(context.Background(), pragma)
		return err
	}})
}

func (s *Store) limitSize(ctx context.Context, extra int) error {
	return s.write(ctx, func(tx *wtx) error {
		var pages int
		if err := tx.QueryRowContext(context.Background(), `PRAGMA page_count`).Scan(&pages); err != nil {
			return err
		}
		limit := pages + extra
		if extra < 0 {
			limit = 1 << 30
		}
		_, err := tx.ExecContext(context.Background(), fmt.Sprintf(`PRAGMA max_page_count = %d`, limit))
		return err
	})
}
