package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// A writeOp is one call's unit of work for the writer goroutine.
type writeOp struct {
	fn    func(tx *wtx) error
	one   bool         // fn changes the database with at most one statement (see write1)
	long  bool         // maintenance (see writeLong): MaintenanceTimeout instead of StatementTimeout
	auto  bool         // exactly one statement: autocommit on PostgreSQL (see writeAuto)
	bare  bool         // SQLite: fn runs on the write connection outside any transaction (see RefuseWrites)
	ack   *ackRows     // CreateJobAudited on PostgreSQL: queued for the acker (see acker), fn its own statement
	state atomic.Int32 // opPending, then opTaken (by the writer or the acker) or opAbandoned (by the caller)
	done  chan error   // buffered 1; receives the outcome once the op is taken
}

const (
	opPending int32 = iota
	opTaken
	opAbandoned
)

// write runs fn inside a write transaction on the writer goroutine and
// returns fn's error, or the error of the transaction that carried it.
//
// fn must only use tx, must not keep it, and must be quick (it holds the
// database's write lock). Its statements run without the caller's context:
// interrupting a statement would roll back the whole transaction, and with
// it the other calls batched into it. The caller's ctx instead bounds the
// wait: if ctx ends before the writer takes the call, write returns
// ctx.Err() and fn never runs; once taken, the call runs to completion and
// write returns its outcome. So a nil error means committed, and an error
// means fn's changes are not in the database.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	return s.submit(ctx, &writeOp{fn: fn})
}

// write1 is write for a call whose fn changes the database with exactly one
// statement and returns an error only when that statement failed or changed
// nothing. SQLite undoes a failed statement by itself, so such a call needs
// no savepoint of its own when batched: that saves two statements and the
// savepoint's journal on the hot paths (new jobs, events, audit entries).
func (s *Store) write1(ctx context.Context, fn func(tx *wtx) error) error {
	return s.submit(ctx, &writeOp{fn: fn, one: true})
}

// writeAuto is write1 for a call whose fn runs exactly one statement (no
// read before it, nothing after it): on PostgreSQL it runs in autocommit,
// one round trip, the database making the statement atomic by itself. The
// hot paths use it (a new job, an audit entry, a delivery's claim).
func (s *Store) writeAuto(ctx context.Context, fn func(tx *wtx) error) error {
	return s.submit(ctx, &writeOp{fn: fn, one: true, auto: true})
}

// writeLong is write for maintenance that may take longer than a chat
// command may wait (pruning a year of history, a copy's batch): on
// PostgreSQL its transaction is bounded by MaintenanceTimeout instead of
// StatementTimeout. No chat command's reply waits on it.
func (s *Store) writeLong(ctx context.Context, fn func(tx *wtx) error) error {
	return s.submit(ctx, &writeOp{fn: fn, long: true})
}

// MaintenanceTimeout bounds writeLong's transactions on PostgreSQL.
const MaintenanceTimeout = 2 * time.Minute

func (s *Store) submit(ctx context.Context, op *writeOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	op.done = make(chan error, 1)
	queue := s.ops
	if op.ack != nil {
		queue = s.acks
	}
	select {
	case queue <- op:
	case <-s.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-op.done:
		s.health.note(err)
		return err
	case <-ctx.Done():
		if op.state.CompareAndSwap(opPending, opAbandoned) {
			return ctx.Err()
		}
		err := <-op.done
		s.health.note(err)
		return err
	}
}

// writer is the only user of s.wdb after Open. It takes one queued call,
// begins a transaction (waiting for other processes' locks), adds every call
// that queued up meanwhile, runs them, commits, and reports to each caller.
//
// On PostgreSQL several writers run (pgWriters), each call in a
// transaction of its own: the database orders concurrent transactions
// itself (as it must for the other machine's anyway), and a call never
// waits behind another's batch.
func (s *Store) writer() {
	defer s.writerWG.Done()
	batch := make([]*writeOp, 0, maxBatch)
	var op, next *writeOp // next: a bare call met while draining, run after the batch
	for {
		if next != nil {
			op, next = next, nil
			batch = append(batch[:0], op)
		} else {
			select {
			case op = <-s.ops:
				batch = append(batch[:0], op)
			case <-s.closing:
				for _, st := range s.stmts {
					if st != nil {
						st.Close()
					}
				}
				return
			}
		}
		// Let the callers that the last commit woke up queue again
		// before the batch is cut: without this, half the transactions
		// carry a single call and the rest wait behind them.
		runtime.Gosched()
		if s.dialect == postgresSQL && op.auto {
			s.runAutocommit(op)
			continue
		}
		if op.bare {
			if op.state.CompareAndSwap(opPending, opTaken) {
				op.done <- runOp(&wtx{s: s}, op.fn)
			}
			continue
		}
		// On PostgreSQL the whole transaction is bounded: a database that
		// stops answering fails the batch instead of holding its callers.
		txCtx, cancel := context.Background(), context.CancelFunc(func() {})
		if s.dialect == postgresSQL {
			// (One call per transaction there: batch is op alone.)
			limit := StatementTimeout
			if op.long {
				limit = MaintenanceTimeout
			}
			txCtx, cancel = context.WithTimeout(txCtx, limit)
		}
		t0 := time.Now()
		tx, err := s.wdb.BeginTx(txCtx, nil)
		if err != nil && s.dialect == postgresSQL && pgRefusal(err) && txCtx.Err() == nil {
			// A pooled connection the server or a proxy closed meanwhile:
			// once more, on another (or a new) connection.
			tx, err = s.wdb.BeginTx(txCtx, nil)
		}
		if s.dialect == sqliteSQL {
			batch, next = s.drain(batch)
		}
		if err != nil {
			if txCtx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrUnreachable, err)
			}
			cancel()
			s.m.observe(t0, err)
			err = fmt.Errorf("begin write transaction: %w", err)
			for _, op := range batch {
				if op.state.CompareAndSwap(opPending, opTaken) {
					op.done <- err
				}
			}
			continue
		}
		s.m.observe(t0, s.runBatch(txCtx, tx, batch))
		cancel()
		clear(batch)
		s.prepareNew()
	}
}

// drain adds to batch the calls queued meanwhile, up to maxBatch (SQLite:
// one transaction carries them all). A bare call (see RefuseWrites) ends
// the batch: it is returned as next, to run once the transaction is over.
func (s *Store) drain(batch []*writeOp) (_ []*writeOp, next *writeOp) {
	for len(batch) < maxBatch {
		select {
		case op := <-s.ops:
			if op.bare {
				return batch, op
			}
			batch = append(batch, op)
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// runBatch runs the pending calls of batch in tx and commits. It returns
// the error of the transaction itself (nil when it committed or had
// nothing to commit), for the store's metrics.
func (s *Store) runBatch(txCtx context.Context, sqlTx *sql.Tx, batch []*writeOp) error {
	tx := &wtx{tx: sqlTx, s: s, ctx: txCtx}
	taken := make([]*writeOp, 0, len(batch))
	for _, op := range batch {
		if op.state.CompareAndSwap(opPending, opTaken) {
			taken = append(taken, op)
		}
	}
	errs := make([]error, len(taken))
	ok := 0
	var poisoned error // the transaction can no longer be trusted
	for i, op := range taken {
		switch {
		case len(taken) == 1:
			errs[i] = runOp(tx, op.fn)
		case op.one && s.dialect == sqliteSQL:
			// (PostgreSQL aborts the whole transaction on any failed
			// statement: there every call of a batch has a savepoint.)
			errs[i] = runOp(tx, op.fn)
			poisoned = txLost(errs[i])
		default:
			errs[i], poisoned = runSavepoint(tx, op.fn)
		}
		if poisoned != nil {
			break
		}
		if errs[i] == nil {
			ok++
		}
	}
	var commitErr error
	if poisoned != nil || ok == 0 {
		// Nothing to keep. A failed rollback leaves nothing committed
		// either: the driver resets the connection before the next Begin.
		_ = sqlTx.Rollback()
		if poisoned != nil {
			commitErr = poisoned
			for i := range errs {
				errs[i] = nil
			}
		}
	} else if err := sqlTx.Commit(); err != nil {
		commitErr = fmt.Errorf("commit: %w", err)
	} else if s.dialect == postgresSQL {
		// No checkpointer: PostgreSQL checkpoints by itself.
	} else if s.commits++; s.commits >= checkpointEvery {
		s.commits = 0
		select {
		case s.ckpt <- struct{}{}:
		default: // one is already pending
		}
	}
	for i, op := range taken {
		err := errs[i]
		if err == nil {
			err = commitErr
		}
		if err != nil && txCtx.Err() != nil && !errors.Is(err, ErrUnreachable) {
			// The transaction ran out of StatementTimeout (PostgreSQL only).
			err = fmt.Errorf("%w: %w", ErrUnreachable, err)
		}
		op.done <- err
	}
	return commitErr
}

// txLost reports, as an error, whether err from a statement may have ended
// the whole transaction rather than just the statement. SQLite undoes only
// the statement for constraint violations (CHECK, NOT NULL, UNIQUE, foreign
// keys, RAISE(ABORT) in triggers), and the store's own errors (not found,
// transitions, bad input) change nothing; anything else (disk full, I/O
// errors, out of memory, a panic) may have rolled the transaction back, and
// then the rest of the batch must not run in autocommit mode.
func txLost(err error) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) || errors.As(err, new(*TransitionError)) {
		return nil
	}
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return nil
	}
	return fmt.Errorf("write transaction abandoned after %w", err)
}

// runOp runs fn, turning a panic into an error so that one bad call cannot
// take down the writer.
func runOp(tx *wtx, fn func(tx *wtx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store: panic in write: %v", r)
		}
	}()
	return fn(tx)
}

// runSavepoint runs fn inside a savepoint of tx and rolls the savepoint back
// when fn fails, so the calls batched with it are unaffected. It returns fn's
// error, and a second error when the savepoint itself failed, after which the
// whole transaction must be rolled back.
func runSavepoint(tx *wtx, fn func(tx *wtx) error) (err, poisoned error) {
	ctx := context.Background()
	if _, err := tx.ExecContext(ctx, "SAVEPOINT op"); err != nil {
		return nil, fmt.Errorf("write transaction: savepoint: %w", err)
	}
	err = runOp(tx, fn)
	if err != nil {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO op"); rerr != nil {
			return err, fmt.Errorf("write transaction: roll back to savepoint after %w: %w", err, rerr)
		}
	}
	if _, rerr := tx.ExecContext(ctx, "RELEASE op"); rerr != nil {
		return err, fmt.Errorf("write transaction: release savepoint: %w", rerr)
	}
	return err, nil
}

// wtx is the write transaction handed to a write call. Its methods mirror
// *sql.Tx's; statements run as prepared statements cached for the life of
// the Store, which saves parsing and planning them on every call (most of
// the cost of a small insert).
type wtx struct {
	tx *sql.Tx // nil: autocommit on s.wdb (PostgreSQL, one statement)
	s  *Store
	// ctx bounds the transaction on PostgreSQL (StatementTimeout): its
	// statements run under it, whatever context a call passes.
	ctx context.Context
}

// bound returns the context a statement of the transaction runs under.
func (t *wtx) bound(ctx context.Context) context.Context {
	if t.s.dialect == postgresSQL && t.ctx != nil {
		return t.ctx
	}
	return ctx
}

// stmt returns the transaction's handle on the cached statement for query,
// or nil when it is not prepared yet (it will be, between transactions).
// On PostgreSQL nothing is prepared: no statement outlives its call, so
// that PgBouncer in transaction mode may pool the connections.
func (t *wtx) stmt(ctx context.Context, query string) *sql.Stmt {
	if t.s.dialect == postgresSQL {
		return nil
	}
	st, ok := t.s.stmts[query]
	if !ok {
		t.s.stmts[query] = nil
		t.s.unprepared = append(t.s.unprepared, query)
	}
	if st == nil {
		return nil
	}
	return t.tx.StmtContext(ctx, st)
}

func (t *wtx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	if t.tx == nil {
		return t.s.wdb.ExecContext(t.bound(ctx), t.s.dialect.rebind(query), t.s.dialect.args(args)...)
	}
	return t.tx.ExecContext(t.bound(ctx), t.s.dialect.rebind(query), t.s.dialect.args(args)...)
}

func (t *wtx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	if t.tx == nil {
		return t.s.wdb.QueryContext(t.bound(ctx), t.s.dialect.rebind(query), t.s.dialect.args(args)...)
	}
	return t.tx.QueryContext(t.bound(ctx), t.s.dialect.rebind(query), t.s.dialect.args(args)...)
}

func (t *wtx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	if t.tx == nil {
		return t.s.wdb.QueryRowContext(t.bound(ctx), t.s.dialect.rebind(query), t.s.dialect.args(args)...)
	}
	return t.tx.QueryRowContext(t.bound(ctx), t.s.dialect.rebind(query), t.s.dialect.args(args)...)
}

// prepareNew prepares the statements first seen in the last transaction. It
// runs on the writer goroutine between transactions, when the one write
// connection is free. A statement that fails to prepare stays unprepared and
// keeps running unprepared (it reports its own error there).
func (s *Store) prepareNew() {
	if s.dialect == postgresSQL {
		return // nothing is prepared there (see stmt), and several writers run
	}
	for _, q := range s.unprepared {
		st, err := s.wdb.Prepare(q)
		if err != nil {
			continue
		}
		s.stmts[q] = st
	}
	s.unprepared = s.unprepared[:0]
}

// clockNow is the statement's SQL for the database's clock in UTC
// microseconds since the Unix epoch (PostgreSQL's clock_timestamp(): the
// moment the statement runs, not the transaction's start).
const clockNow = `SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint`

// now is the time leases and liveness are judged by. On PostgreSQL it is
// the database's clock, so that processes on machines whose clocks differ
// agree on every expiry; on SQLite it is this machine's clock, which every
// process on the file shares (SQLite's locking needs a local file system).
func (t *wtx) now() (time.Time, error) {
	if t.s.dialect != postgresSQL {
		return now(), nil
	}
	var us int64
	before := time.Now()
	if err := t.QueryRowContext(context.Background(), clockNow).Scan(&us); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	db := time.UnixMicro(us).UTC()
	t.s.noteClock(before, db)
	return db, nil
}

// noteClock records how far the database's clock (db, read by a statement
// sent at before and answered now) is from this machine's, for Clock.
func (s *Store) noteClock(before time.Time, db time.Time) {
	mid := before.Add(time.Since(before) / 2)
	s.clockOffset.Store(int64(db.Sub(mid)))
}

// Clock returns the store's clock for callers that need the time often
// (the scheduler's firings): this machine's clock on SQLite; on PostgreSQL
// this machine's clock corrected by the database clock's offset from it,
// as last measured by a lease statement or Now (leases are renewed every
// few seconds, so the offset stays fresh).
func (s *Store) Clock() func() time.Time {
	if s.dialect != postgresSQL {
		return time.Now
	}
	return func() time.Time { return time.Now().Add(time.Duration(s.clockOffset.Load())) }
}

// Now is the time by the store's clock (see wtx.now): the database's on
// PostgreSQL, this machine's on SQLite. Callers that compare times the
// store wrote for leases and liveness (an owner's expiry) use it.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if s.dialect != postgresSQL {
		return now(), nil
	}
	var us int64
	before := time.Now()
	if err := s.rdb.QueryRowContext(ctx, clockNow).Scan(&us); err != nil {
		return time.Time{}, fmt.Errorf("store %s: read the database's clock: %w", s.name, err)
	}
	db := time.UnixMicro(us).UTC()
	s.noteClock(before, db)
	return db, nil
}

// runAutocommit runs op, whose fn makes one statement (writeAuto), on its own
// without a transaction (PostgreSQL makes the statement atomic by itself):
// one round trip instead of BEGIN, the statement and COMMIT.
func (s *Store) runAutocommit(op *writeOp) {
	if !op.state.CompareAndSwap(opPending, opTaken) {
		return
	}
	op.done <- s.autocommit(op.fn)
}

// autocommit runs fn, which makes one statement, in autocommit, bounded by
// StatementTimeout, and returns its error (wrapping ErrUnreachable when the
// statement ran out of time).
func (s *Store) autocommit(fn func(tx *wtx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), StatementTimeout)
	defer cancel()
	t0 := time.Now()
	err := runOp(&wtx{s: s, ctx: ctx}, fn)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrUnreachable) {
		err = fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	var failed error
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalid) && !errors.As(err, new(*TransitionError)) {
		failed = err
	}
	s.m.observe(t0, failed)
	return err
}
