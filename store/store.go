// Package store is opsbot's persistence: jobs and their events, benchmark
// results, schedules, an append-only audit log, a small key-value table, and
// the leases that keep several opsbot processes on one store from changing
// the same service or node at once (see AcquireLease), kept in one SQLite
// file (modernc.org/sqlite, pure Go, no cgo; Open), or in a PostgreSQL
// database that opsbot processes on several machines share (pgx;
// OpenPostgres, see postgres.go for what differs there: the connection
// pool, statement timeouts, the database's clock for leases). The same
// statements and the same migration sequence serve both (dialect.go,
// migrate.go); what follows describes SQLite, and holds for PostgreSQL
// except where postgres.go says otherwise.
//
// The file is opened in WAL mode with a busy timeout, foreign keys on and
// write transactions that take the write lock up front (BEGIN IMMEDIATE), so
// that readers never block writers and two writers never deadlock. Within one
// process every write goes through a single writer goroutine that holds the
// only write connection: calls queue first come, first served, and calls that
// arrive while a transaction is in flight are committed together in the next
// one (group commit); one call's error never undoes another's work. A WAL
// checkpointer goroutine with its own connection keeps the WAL short, so
// the writer does not pause for checkpoints. Reads use a separate pool of
// read-only connections and see every write that returned before they
// started.
//
// History is kept small by Prune (job events and audit entries older than a
// cutoff; `opsbot serve` runs it daily for store.retention), and Backup
// writes a consistent copy of a file another process is using.
//
// Every write call returns only once its transaction has committed (nil) or
// failed (an error, and nothing of the call is in the file). Errors wrap
// ErrNotFound, ErrInvalid or ErrClosed, or are a *TransitionError or
// *SchemaVersionError, where callers need to branch; anything else is a
// database failure, and a write that failed that way is safe to retry.
//
// Several processes may open the same file at once (SQLite's file locks and
// the busy timeout serialise them); the schema is migrated on Open with
// versioned migrations embedded in the binary, and a database written by a
// newer binary is refused with a *SchemaVersionError instead of being
// damaged.
//
// The file, its directory and SQLite's -wal and -shm files are private to
// the owner (0600, 0700). Open refuses an empty file (it is not a store) and
// a file that is not a database, and runs SQLite's quick_check on files small
// enough for it to be cheap, so a damaged store is named before any job
// starts; Check and CheckFile run the full integrity check.
//
// All times are stored as UTC nanoseconds since the Unix epoch and come back
// in UTC with nanosecond precision (compare them with time.Time.Equal).
// Commits use synchronous=NORMAL: a crash of the process loses nothing that
// was committed; a power loss may lose the last transactions but never
// corrupts the file.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is wrapped by every error that reports a missing job,
// schedule, or other record; test with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrInvalid is wrapped by every error that rejects an argument (an empty
// command, an unknown status, malformed JSON, ...). Nothing was written.
var ErrInvalid = errors.New("invalid argument")

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("store is closed")

// BusyTimeout is how long one connection waits for a lock another process
// holds before it gives up with SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// maxBatch bounds how many queued writes share one transaction.
const maxBatch = 256

// Checkpointing: the checkpointer goroutine copies the WAL back into the
// database file every checkpointEvery commits, on its own connection, so
// that the writer (and the callers waiting on it) never pays for the copy
// and its fsyncs. walAutoCheckpoint (frames) is SQLite's own fallback.
const (
	checkpointEvery   = 64
	walAutoCheckpoint = 10000
)

// Store is an open opsbot database. It is safe for concurrent use by any
// number of goroutines. Close it when done.
type Store struct {
	path    string  // the SQLite file; "" on PostgreSQL
	name    string  // what messages call the store: the file, or the PostgreSQL host and database (never the password)
	dialect dialect // the SQL the database speaks
	m       *metrics
	// SQLite: wdb has exactly one connection, used only by the writer
	// goroutine, rdb is a read-only pool and cdb one connection for the
	// checkpointer goroutine. PostgreSQL: wdb and rdb share one bounded
	// pool (the writer takes one of its connections per transaction), and
	// cdb is nil.
	wdb *sql.DB
	rdb *db
	cdb *sql.DB
	// pgConfig is the PostgreSQL connection's configuration (SideDB opens
	// with it); nil for SQLite.
	pgConfig *pgx.ConnConfig

	commits int           // by the writer, since the last checkpoint request
	ckpt    chan struct{} // capacity 1: a checkpoint is wanted

	ops chan *writeOp // unbuffered: blocked senders form the FIFO queue
	// acks queues CreateJobAudited's calls for the acker (PostgreSQL;
	// nil on SQLite), as ops does for the writers.
	acks chan *writeOp
	// Prepared write statements by query text; nil while not yet prepared.
	// Used only by the writer goroutine.
	stmts      map[string]*sql.Stmt
	unprepared []string

	// The owner RegisterOwner registered: CreateJob stamps it on new jobs.
	ownerMu sync.Mutex
	ownerID string

	health writeHealth // whether the database refuses writes; see WriteHealth
	// claimsPruned is when ClaimDelivery last removed old claims (Unix ns).
	claimsPruned atomic.Int64
	// clockOffset is the database's clock minus this machine's (ns), as
	// last measured (PostgreSQL); see Clock.
	clockOffset atomic.Int64

	closing   chan struct{}
	closeOnce sync.Once
	writerWG  sync.WaitGroup
	closeErr  error
}

// Open opens (creating it and its directory when missing) the SQLite
// database at path and migrates its schema to the newest version this binary
// knows. path must be a file path, not empty. A new file, its directory and
// SQLite's -wal and -shm files are private to the owner (0600, 0700 for the
// directory) whatever the umask. An existing empty file is refused with
// ErrEmptyFile (it is not a store; opening it would silently start a fresh
// one), a file that is not a database with an error that says so, and a
// database up to QuickCheckMaxBytes with a *CorruptError when SQLite's
// quick_check finds damage; nothing is written to a refused file. A database
// whose schema is newer than this binary's is refused with a
// *SchemaVersionError and left untouched. Open waits up to BusyTimeout for another process that holds the
// write lock, and gives up early when ctx is done.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("open store: %w: the database path is empty", ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := prepareFile(abs); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}

	wdb, err := sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	// Switching a new file to WAL needs an exclusive lock, and SQLite
	// answers SQLITE_BUSY at once, without waiting, when two connections
	// try it together; hence the retry around the first connection.
	if err := retryBusy(ctx, func() error { return wdb.PingContext(ctx) }); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, notStore(abs, err))
	}
	if err := privateSideFiles(abs); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := quickCheckAtOpen(ctx, wdb, abs); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := retryBusy(ctx, func() error { return migrate(ctx, wdb, migrationFS, sqliteSQL) }); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}

	rdb, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	n := min(max(runtime.GOMAXPROCS(0), 2), 8)
	rdb.SetMaxOpenConns(n)
	rdb.SetMaxIdleConns(n)
	rdb.SetConnMaxIdleTime(5 * time.Minute)
	if err := retryBusy(ctx, func() error { return rdb.PingContext(ctx) }); err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}

	cdb, err := sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	cdb.SetMaxOpenConns(1)

	m := &metrics{}
	s := &Store{
		path:    abs,
		name:    abs,
		dialect: sqliteSQL,
		m:       m,
		wdb:     wdb,
		rdb:     &db{DB: rdb, d: sqliteSQL, m: m},
		cdb:     cdb,
		ckpt:    make(chan struct{}, 1),
		ops:     make(chan *writeOp),
		stmts:   map[string]*sql.Stmt{},
		closing: make(chan struct{}),
	}
	s.health.settled = refusalSettles
	s.writerWG.Add(2)
	go s.writer()
	go s.checkpointer()
	return s, nil
}

// retryBusy runs fn until it succeeds, fails with something other than
// SQLITE_BUSY/SQLITE_LOCKED, BusyTimeout has passed, or ctx is done.
func retryBusy(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(BusyTimeout)
	wait := time.Millisecond
	for {
		err := fn()
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}

// dsn builds the driver's connection string for the file at abs.
func dsn(abs string, readOnly bool) string {
	u := url.URL{Scheme: "file", Path: abs}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		// The checkpointer goroutine keeps the WAL short; the writer
		// checkpoints itself only when it falls far behind.
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", walAutoCheckpoint))
		q.Set("_txlock", "immediate")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Path is the absolute path of the SQLite database file; "" on PostgreSQL.
func (s *Store) Path() string { return s.path }

// Name says which database the store is, for people: the SQLite file, or
// "postgres HOST:PORT/DB" (never the password).
func (s *Store) Name() string { return s.name }

// Driver is "sqlite" or "postgres".
func (s *Store) Driver() string { return s.dialect.String() }

// checkpointer runs a passive WAL checkpoint whenever the writer asks. A
// passive checkpoint neither waits for nor blocks readers and writers, of
// this process or another; what it cannot copy yet it copies next time.
func (s *Store) checkpointer() {
	defer s.writerWG.Done()
	for {
		select {
		case <-s.ckpt:
			// Errors (another process checkpointing, a busy reader) only
			// mean the WAL stays longer until the next round.
			_, _ = s.cdb.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
		case <-s.closing:
			return
		}
	}
}

// Close waits for the writes already taken by the writer to commit, refuses
// new calls with ErrClosed, and closes the database. It is safe to call more
// than once; later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.writerWG.Wait()
		var err error
		if s.dialect == postgresSQL {
			err = s.wdb.Close()
		} else {
			err = errors.Join(s.rdb.Close(), s.cdb.Close(), s.wdb.Close())
		}
		if err != nil {
			s.closeErr = fmt.Errorf("close store %s: %w", s.name, err)
		}
	})
	return s.closeErr
}

// TransitionError reports a job state change that the job's current state
// does not allow (starting a job that is not queued, finishing one that has
// already finished). Nothing was changed.
type TransitionError struct {
	JobID int64
	From  Status // the state the job is in
	To    Status // the state that was asked for
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("job %d is %s and cannot become %s", e.JobID, e.From, e.To)
}

// Times are stored as int64 nanoseconds since the Unix epoch, which covers
// the years 1678 to 2262.
var (
	minTime = time.Unix(0, math.MinInt64).UTC()
	maxTime = time.Unix(0, math.MaxInt64).UTC()
)

// checkTime rejects times that cannot be stored. The zero time is allowed
// (it means "unset").
func checkTime(what string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		return fmt.Errorf("%w: %s %s is outside the storable range 1678..2262", ErrInvalid, what, t.Format(time.RFC3339))
	}
	return nil
}

// nanos converts a time to its stored form: NULL for the zero time.
func nanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

// fromNanos is the inverse of nanos.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// now is the store's clock: UTC, without a monotonic reading.
func now() time.Time { return time.Now().UTC().Round(0) }

// orNow returns t in UTC, or the current time when t is zero.
func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return now()
	}
	return t.UTC().Round(0)
}

// limitOr returns limit, or def when limit is not positive.
func limitOr(limit, def int) int {
	if limit <= 0 {
		return def
	}
	return limit
}
