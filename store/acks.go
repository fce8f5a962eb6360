package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit of acks on PostgreSQL. A chat command's ack waits for its
// job and the audit entry accepting it (CreateJobAudited), one autocommit
// statement. At a hundred calls at once it is the statements, not the
// commits, that cost: each one's round trip, parse, plan and commit take
// the CPU. So CreateJobAudited's calls have a queue of their own (acks)
// and a goroutine of their own (the acker, pgAckers), and the calls that
// queue while a statement runs go to the database together, as one
// statement that inserts all their jobs and audit entries (ackBatchSQL).
// Nothing waits for calls to come: a call that finds the acker idle runs
// its own statement (ackSQL) at once, as it did before. SQLite's writer
// already commits the calls queued together in one transaction.

// maxAckBatch bounds how many calls share one statement.
const maxAckBatch = 128

// ackRows is what a CreateJobAudited call writes on PostgreSQL: the new
// job, its audit entry, and, once committed, the job's id.
type ackRows struct {
	j  Job
	e  AuditEntry
	id int64 // set, once committed, by whichever statement carried the call
}

// ackColumns is how many values a call gives ackSQL (see ackRows.column).
const ackColumns = 24

// args returns the rows' values in the order ackSQL takes them (and each
// array of ackBatchSQL): the job's 17 columns, then the entry's 7.
func (a *ackRows) args() []any {
	out := make([]any, ackColumns)
	for col := range out {
		out[col] = a.column(col)
	}
	return out
}

// ackSQL inserts one call's job and audit entry, and returns the job's id.
const ackSQL = `WITH j AS (INSERT INTO jobs
	(command, platform, user_id, room, thread, service, host, status, error, result, schedule_id, created_at, started_at, ended_at, owner, args, dry_run)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id)
	INSERT INTO audit_log (at, platform, user_id, room, command, decision, detail, job_id)
	SELECT ?, ?, ?, ?, ?, ?, ?, id FROM j RETURNING job_id`

// ackOp returns the write call that records a's rows: queued for the
// acker (submit), its fn running ackSQL when the call is alone (or its
// batch failed).
func ackOp(a *ackRows) *writeOp {
	return &writeOp{ack: a, fn: func(tx *wtx) error {
		return tx.QueryRowContext(context.Background(), ackSQL, a.args()...).Scan(&a.id)
	}}
}

// ackBatchSQL records several calls at once: its 24 arguments are arrays
// with one element per call, one array per column of ackRows.args (the
// job's 17, then the entry's 7), taken apart by unnest WITH ORDINALITY.
// It takes the jobs' ids from the jobs' identity sequence first (a
// MATERIALIZED CTE: once per row; the sequence is looked up once, in a
// subquery, not for every row), inserts the jobs with them and the
// entries pointing at them, and returns one (ord, id) pair per call, ord
// counting the calls from 1, in no particular order. (Arrays rather than
// a VALUES list: the statement's text stays the same whatever the number
// of calls, and PostgreSQL parses and plans it in a fraction of the time a
// list of thousands of placeholders takes.)
const ackBatchSQL = `WITH n AS MATERIALIZED (
	SELECT v.*, nextval((SELECT pg_get_serial_sequence('jobs', 'id')::regclass)) AS id
	FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[],
		?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::bigint[],
		?::bigint[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[])
		WITH ORDINALITY AS v (command, platform, user_id, room, thread, service, host, status, error, result,
			schedule_id, created_at, started_at, ended_at, owner, args, dry_run,
			a_at, a_platform, a_user_id, a_room, a_command, a_decision, a_detail, ord)),
	j AS (INSERT INTO jobs
		(id, command, platform, user_id, room, thread, service, host, status, error, result, schedule_id, created_at, started_at, ended_at, owner, args, dry_run)
		SELECT id, command, platform, user_id, room, thread, service, host, status, error, result, schedule_id, created_at, started_at, ended_at, owner, args, dry_run FROM n),
	a AS (INSERT INTO audit_log (at, platform, user_id, room, command, decision, detail, job_id)
		SELECT a_at, a_platform, a_user_id, a_room, a_command, a_decision, a_detail, id FROM n)
	SELECT ord, id FROM n`

// ackBatchArgs returns ackBatchSQL's arguments for the calls of taken (ack
// calls: see ackOp), in taken's order: each column's values as one array
// in PostgreSQL's text form (see pgArray), the same values ackRows.args
// gives ackSQL.
func ackBatchArgs(taken []*writeOp) []any {
	args := make([]any, 0, ackColumns)
	var b pgArray
	for col := range ackColumns {
		b.start()
		for _, op := range taken {
			b.add(op.ack.column(col))
		}
		args = append(args, b.end())
	}
	return args
}

// column returns the rows' value for column col of args: a string, an
// int64, or nil for NULL.
func (a *ackRows) column(col int) any {
	j, e := &a.j, &a.e
	null := func(v sql.NullInt64) any {
		if !v.Valid {
			return nil
		}
		return v.Int64
	}
	switch col {
	case 0:
		return j.Command
	case 1:
		return j.Platform
	case 2:
		return j.User
	case 3:
		return j.Room
	case 4:
		return j.Thread
	case 5:
		return j.Service
	case 6:
		return j.Host
	case 7:
		return string(j.Status)
	case 8:
		return j.Error
	case 9:
		if r := nullJSON(j.Result); r.Valid {
			return r.String
		}
		return nil
	case 10:
		return null(nullID(j.ScheduleID))
	case 11:
		return j.CreatedAt.UnixNano()
	case 12:
		return null(nanos(j.StartedAt))
	case 13:
		return null(nanos(j.EndedAt))
	case 14:
		return j.Owner
	case 15:
		if r := nullJSON(j.Args); r.Valid {
			return r.String
		}
		return nil
	case 16:
		return flag(j.DryRun)
	case 17:
		return e.At.UnixNano()
	case 18:
		return e.Platform
	case 19:
		return e.User
	case 20:
		return e.Room
	case 21:
		return e.Command
	case 22:
		return e.Decision
	case 23:
		return e.Detail
	}
	panic(fmt.Sprintf("ackRows: no column %d", col))
}

// pgArray builds a one-dimensional array in PostgreSQL's text form (what
// array_in reads, for any element type): {e1,e2,...}, each string
// double-quoted with its backslashes and double quotes escaped by a
// backslash, so that every byte of it reaches the element as it is; each
// int64 in decimal; NULL for nil. (pgx would encode []string and []*int64
// the same, through reflection and at several times the cost, on the hot
// path of every batch.)
type pgArray struct {
	strings.Builder
	n int
}

func (b *pgArray) start() {
	b.Reset()
	b.n = 0
	b.WriteByte('{')
}

func (b *pgArray) add(v any) {
	if b.n > 0 {
		b.WriteByte(',')
	}
	b.n++
	switch v := v.(type) {
	case nil:
		b.WriteString("NULL")
	case int64:
		var buf [20]byte
		b.Write(strconv.AppendInt(buf[:0], v, 10))
	case string:
		b.WriteByte('"')
		for i := 0; i < len(v); i++ {
			if c := v[i]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[i])
		}
		b.WriteByte('"')
	default:
		panic(fmt.Sprintf("pgArray: %T", v))
	}
}

// end closes the array and returns it.
func (b *pgArray) end() string {
	b.WriteByte('}')
	return b.Builder.String()
}

// acker is the PostgreSQL store's acker: it takes one queued
// CreateJobAudited call, adds every call already queued behind it (up to
// maxAckBatch, without waiting for more), and records them (runAcks).
// It stops on Close, as the writers do.
func (s *Store) acker() {
	defer s.writerWG.Done()
	batch := make([]*writeOp, 0, maxAckBatch)
	for {
		select {
		case op := <-s.acks:
			batch = append(batch[:0], op)
		case <-s.closing:
			return
		}
		// As the writer does: let the callers the last statement woke up
		// queue again before the batch is cut.
		runtime.Gosched()
	drain:
		for len(batch) < maxAckBatch {
			select {
			case op := <-s.acks:
				batch = append(batch, op)
			default:
				break drain
			}
		}
		s.runAcks(batch)
		clear(batch)
	}
}

// runAcks records the pending calls of batch (ack calls: see ackOp) and
// reports to each caller; calls their callers abandoned are skipped. One
// call runs its own statement, as it would alone; several run as one
// statement (ackBatchSQL), in autocommit, bounded by StatementTimeout: all
// of them are committed, or none.
//
// When PostgreSQL answers that the batch's statement failed for a reason of
// its own (a row it refused: nothing of the statement was committed), each
// call runs again on its own, so that only the calls at fault fail, each
// with its own error. When the statement's outcome says the database refuses
// writes, or is unknown (it did not answer within StatementTimeout, the
// connection broke), every call gets that error: the batch may have been
// committed, and calls one by one would each wait out the timeout again.
func (s *Store) runAcks(batch []*writeOp) {
	taken := make([]*writeOp, 0, len(batch))
	for _, op := range batch {
		if op.state.CompareAndSwap(opPending, opTaken) {
			taken = append(taken, op)
		}
	}
	switch len(taken) {
	case 0:
		return
	case 1:
		taken[0].done <- s.autocommit(taken[0].fn)
		return
	}
	ids, err := s.insertAcks(taken)
	if err == nil {
		for i, op := range taken {
			op.ack.id = ids[i]
			op.done <- nil
		}
		return
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pgRefusal(err) {
		for _, op := range taken {
			op.done <- err
		}
		return
	}
	for i, op := range taken {
		err := s.autocommit(op.fn)
		op.done <- err
		if pgRefusal(err) {
			// The database went away meanwhile: the rest would wait
			// for it one by one.
			for _, op := range taken[i+1:] {
				op.done <- err
			}
			return
		}
	}
}

// insertAcks runs ackBatchSQL for the calls of taken and returns their
// jobs' ids, in taken's order.
func (s *Store) insertAcks(taken []*writeOp) (ids []int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), StatementTimeout)
	defer cancel()
	t0 := time.Now()
	defer func() {
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrUnreachable) {
			err = fmt.Errorf("%w: %w", ErrUnreachable, err)
		}
		s.m.observe(t0, err)
	}()
	rows, err := (&wtx{s: s, ctx: ctx}).QueryContext(ctx, ackBatchSQL, ackBatchArgs(taken)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids = make([]int64, len(taken))
	for rows.Next() {
		var ord, id int64
		if err := rows.Scan(&ord, &id); err != nil {
			return nil, err
		}
		if ord < 1 || ord > int64(len(ids)) || ids[ord-1] != 0 {
			return nil, fmt.Errorf("ack batch: call %d returned twice or out of range", ord)
		}
		ids[ord-1] = id
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	for i, id := range ids {
		if id == 0 {
			return nil, fmt.Errorf("ack batch: no id returned for call %d", i+1)
		}
	}
	return ids, nil
}
