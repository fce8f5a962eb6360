package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrEmptyFile is wrapped by Open's error for an existing 0-byte file: it is
// not an opsbot store, and opening it would silently start an empty one in
// place of the jobs and history the operator expects.
var ErrEmptyFile = errors.New("empty file: not an opsbot store; move it away or delete it")

// QuickCheckMaxBytes is the largest database file that Open checks with
// SQLite's quick_check before any job starts. The check reads the whole file:
// about 60 ms for a store of 10,000 jobs with five events each (6.7 MiB) on a
// 2-core VM, so about 150 ms at this bound (BenchmarkQuickCheck10kJobs).
// Larger files are checked by Check (`opsbot config check`) only, so that
// start-up stays fast.
const QuickCheckMaxBytes = 16 << 20

// CorruptError reports a database that SQLite's integrity checks found
// damaged. Problems are SQLite's own lines (at most the first ten).
type CorruptError struct {
	Path     string
	Problems []string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("the database is damaged (%s); stop opsbot, move %s away and restore it from a backup, or delete it to start an empty store",
		strings.Join(e.Problems, "; "), e.Path)
}

// prepareFile makes sure the store's directory exists and its file is
// private before the store's connections open it. A missing file is created
// as an empty SQLite database with mode 0600 (SQLite gives its -wal and -shm
// files the same mode) and linked into place in one step, so that another
// process opening the same path at the same time never sees a 0-byte file;
// an existing empty file or a directory is refused.
func prepareFile(abs string) error {
	fi, err := os.Stat(abs)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%w: the path is a directory", ErrInvalid)
	case err == nil && fi.Size() == 0:
		return ErrEmptyFile
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	if err := createFile(abs); err != nil {
		return fmt.Errorf("create database file: %w", err)
	}
	return nil
}

// createFile writes a new, empty SQLite database beside abs and links it to
// abs unless something is there by then.
func createFile(abs string) error {
	f, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".new-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm", tmp + "-journal"} {
			os.Remove(p)
		}
	}()
	// The umask may have cleared bits but never adds any; make it exact.
	if err := errors.Join(f.Chmod(0o600), f.Close()); err != nil {
		return err
	}
	db, err := sql.Open("sqlite", dsn(tmp, false))
	if err != nil {
		return err
	}
	if err := errors.Join(db.Ping(), db.Close()); err != nil {
		return err
	}
	err = os.Link(tmp, abs)
	switch {
	case err == nil, errors.Is(err, fs.ErrExist):
		return nil
	case errors.Is(err, errors.ErrUnsupported), errors.Is(err, fs.ErrPermission):
		// A file system without hard links: rename, unless the file
		// appeared meanwhile (a narrower window, for a rarer case).
		if _, serr := os.Lstat(abs); serr == nil {
			return nil
		}
		return os.Rename(tmp, abs)
	}
	return err
}

// privateSideFiles gives SQLite's -wal and -shm files no more access than the
// database file itself has, whatever the umask was when they were created.
func privateSideFiles(abs string) error {
	fi, err := os.Stat(abs)
	if err != nil {
		return err
	}
	mode := fi.Mode().Perm()
	for _, suffix := range []string{"-wal", "-shm"} {
		side, err := os.Stat(abs + suffix)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if side.Mode().Perm()&^mode != 0 {
			if err := os.Chmod(abs+suffix, side.Mode().Perm()&mode); err != nil {
				return fmt.Errorf("make %s private: %w", filepath.Base(abs+suffix), err)
			}
		}
	}
	return nil
}

// quickCheckAtOpen runs quick_check on a database small enough for the check
// to be cheap (QuickCheckMaxBytes).
func quickCheckAtOpen(ctx context.Context, db *sql.DB, abs string) error {
	fi, err := os.Stat(abs)
	if err != nil {
		return err
	}
	if fi.Size() > QuickCheckMaxBytes {
		return nil
	}
	return integrity(ctx, db, abs, "quick_check")
}

// notStore turns the error of a first connection into a *CorruptError when
// the file is not a database at all.
func notStore(abs string, err error) error {
	if isCorrupt(err) {
		return &CorruptError{Path: abs, Problems: []string{"not an SQLite database: " + err.Error()}}
	}
	return err
}

// isCorrupt reports SQLite's "database disk image is malformed" and "file is
// not a database" errors.
func isCorrupt(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_CORRUPT || code == sqlite3.SQLITE_NOTADB
}

// integrity runs PRAGMA quick_check or integrity_check and turns what it
// finds into a *CorruptError.
func integrity(ctx context.Context, db *sql.DB, abs, pragma string) error {
	var problems []string
	err := retryBusy(ctx, func() error {
		problems = problems[:0]
		rows, err := db.QueryContext(ctx, `PRAGMA `+pragma+`(10)`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return err
			}
			for _, l := range strings.Split(line, "\n") {
				if l = strings.TrimSpace(l); l != "ok" && l != "" && !strings.HasPrefix(l, "*** in database") {
					problems = append(problems, l)
				}
			}
		}
		return rows.Err()
	})
	if err != nil {
		if isCorrupt(err) {
			return &CorruptError{Path: abs, Problems: []string{err.Error()}}
		}
		return fmt.Errorf("%s: %w", pragma, err)
	}
	if len(problems) > 0 {
		return &CorruptError{Path: abs, Problems: problems}
	}
	return nil
}

// Check runs SQLite's full integrity_check and a foreign key check on the
// open store, on a read connection, without blocking writers. It returns a
// *CorruptError naming what is damaged, or another error when the check
// could not run. It reads the whole file: `opsbot config check` calls it.
// On PostgreSQL, whose integrity is the server's, it checks that the
// database answers.
func (s *Store) Check(ctx context.Context) error {
	if s.dialect == postgresSQL {
		return s.Ping(ctx)
	}
	return checkDB(ctx, s.rdb.DB, s.path)
}

// CheckFile checks the store at path without changing it (no migration, no
// write; a reader may create SQLite's -shm file): an empty file is refused
// with ErrEmptyFile, a file that is not a database or is damaged with a
// *CorruptError (SQLite's full integrity_check and a foreign key check),
// and a missing file is fine, since Open creates it. It reads the whole
// file; `opsbot config check` calls it while the bot may be running.
func CheckFile(ctx context.Context, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("check store %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("check store %s: %w", path, err)
	case fi.IsDir():
		return fmt.Errorf("check store %s: %w: the path is a directory", path, ErrInvalid)
	case fi.Size() == 0:
		return fmt.Errorf("check store %s: %w", path, ErrEmptyFile)
	}
	db, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		return fmt.Errorf("check store %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := retryBusy(ctx, func() error { return db.PingContext(ctx) }); err != nil {
		return fmt.Errorf("check store %s: %w", path, notStore(abs, err))
	}
	return checkDB(ctx, db, abs)
}

// checkDB runs integrity_check and the foreign key check on db.
func checkDB(ctx context.Context, db *sql.DB, abs string) error {
	if err := integrity(ctx, db, abs, "integrity_check"); err != nil {
		return fmt.Errorf("check store %s: %w", abs, err)
	}
	var fk int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_foreign_key_check`).Scan(&fk); err != nil {
		return fmt.Errorf("check store %s: foreign keys: %w", abs, notStore(abs, err))
	}
	if fk > 0 {
		return fmt.Errorf("check store %s: %w", abs,
			&CorruptError{Path: abs, Problems: []string{fmt.Sprintf("%d rows refer to missing rows", fk)}})
	}
	return nil
}
