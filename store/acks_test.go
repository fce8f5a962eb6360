package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/testkit"
)

// badUTF8 is a command that passes checkJob and checkAudit but that
// PostgreSQL refuses (invalid byte sequence for encoding UTF8, SQLSTATE
// 22021): a row that fails at the database, with nothing injected.
const badUTF8 = "svc restart \xff"

// ackPlug holds the PostgreSQL store's ackers: a transaction of another
// session locks the jobs table, and one lone CreateJobAudited per acker
// waits on that lock. Calls made meanwhile queue for the ackers until
// release, which is due within StatementTimeout (the plugs' statements
// fail after it).
type ackPlug struct {
	tx    *sql.Tx
	plugs sync.WaitGroup
}

func plugAckers(t *testing.T, s *Store, url string) *ackPlug {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p := &ackPlug{}
	if p.tx, err = db.BeginTx(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.tx.Exec(`LOCK TABLE jobs IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= pgAckers; k++ {
		p.plugs.Go(func() {
			if _, err := s.CreateJobAudited(ctx, Job{Command: fmt.Sprintf("plug %d", k)}, AuditEntry{Decision: DecisionAccepted}); err != nil {
				t.Errorf("plug %d: %v", k, err)
			}
		})
		// One at a time, so that each acker takes one alone.
		waitLockWaiters(t, db, k)
	}
	return p
}

// release lets the ackers go and waits for the plugs to be recorded.
func (p *ackPlug) release(t *testing.T) {
	t.Helper()
	if err := p.tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	p.plugs.Wait()
}

// waitLockWaiters waits until n sessions wait for a lock on the jobs table
// of db's database.
func waitLockWaiters(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	var waiting int
	if !testkit.Poll(StatementTimeout, func() bool {
		err := db.QueryRow(`SELECT COUNT(*) FROM pg_locks
			WHERE database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND relation = 'jobs'::regclass AND NOT granted`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting >= n
	}) {
		t.Fatalf("%d sessions wait for the jobs table, want %d", waiting, n)
	}
}

// checkAcked fails unless the store holds exactly the jobs of want (by id),
// each with the caller's command, user, time, Args and DryRun, and, for
// each, one audit entry pointing at it with the caller's command and user.
func checkAcked(t *testing.T, s *Store, want map[int64]Job) {
	t.Helper()
	ctx := context.Background()
	rows, err := s.rdb.QueryContext(ctx, `SELECT j.id, j.command, j.user_id, j.created_at, j.args, j.dry_run, a.command, a.user_id, a.at
		FROM jobs j LEFT JOIN audit_log a ON a.job_id = j.id WHERE j.command NOT LIKE 'plug %'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[int64]bool{}
	for rows.Next() {
		var id, created int64
		var cmd, user string
		var args, aCmd, aUser sql.NullString
		var dry bool
		var aAt sql.NullInt64
		if err := rows.Scan(&id, &cmd, &user, &created, &args, &dry, &aCmd, &aUser, &aAt); err != nil {
			t.Fatal(err)
		}
		j, ok := want[id]
		switch {
		case !ok:
			t.Errorf("job %d (%q by %s) is stored but no caller got its id", id, cmd, user)
		case seen[id]:
			t.Errorf("job %d has more than one audit entry", id)
		case cmd != j.Command || user != j.User || created != j.CreatedAt.UnixNano():
			t.Errorf("job %d is %q by %s at %d; its caller asked for %q by %s at %d", id, cmd, user, created, j.Command, j.User, j.CreatedAt.UnixNano())
		case args != nullJSON(j.Args) || dry != j.DryRun:
			t.Errorf("job %d has args %v, dry run %v; its caller asked for %q, %v", id, args, dry, j.Args, j.DryRun)
		case !aCmd.Valid:
			t.Errorf("job %d has no audit entry", id)
		case aCmd.String != j.Command || aUser.String != j.User || aAt.Int64 != j.CreatedAt.UnixNano():
			t.Errorf("job %d's audit entry is %q by %s at %d; want %q by %s at %d", id, aCmd.String, aUser.String, aAt.Int64, j.Command, j.User, j.CreatedAt.UnixNano())
		}
		seen[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(want) {
		t.Errorf("%d jobs stored, want %d", len(seen), len(want))
	}
	var orphans int
	if err := s.rdb.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_log WHERE job_id IS NULL`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Errorf("%d audit entries point at no job", orphans)
	}
}

// Many CreateJobAudited calls at once on PostgreSQL, queued behind busy
// ackers so that they share statements: each gets a distinct id, and the
// job with that id and its audit entry are its own.
func TestPostgresAcksConcurrent(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	url := pgtest.Database(t)
	s := openURL(t, url)
	const callers = 200
	plug := plugAckers(t, s, url)
	got := make([]Job, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			user := fmt.Sprintf("U%03d", i)
			in := Job{Command: fmt.Sprintf("mtp steps %d qwen", i), User: user, DryRun: i%2 == 1}
			if i%3 != 0 {
				in.Args = json.RawMessage(fmt.Sprintf(`{"v":1,"command":"mtp steps","args":{"steps":%d,"service":"qwen","dry_run":%v}}`, i, in.DryRun))
			}
			j, err := s.CreateJobAudited(ctx, in,
				AuditEntry{User: user, Command: fmt.Sprintf("mtp steps %d qwen", i), Decision: DecisionAccepted})
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
			got[i] = j
		})
	}
	plug.release(t)
	wg.Wait()
	if t.Failed() {
		return
	}
	want := map[int64]Job{}
	for i, j := range got {
		if j.ID <= 0 || j.Command != fmt.Sprintf("mtp steps %d qwen", i) || j.Status != Queued || j.CreatedAt.IsZero() || j.DryRun != (i%2 == 1) || (j.Args == nil) != (i%3 == 0) {
			t.Errorf("caller %d got %+v", i, j)
		}
		if o, dup := want[j.ID]; dup {
			t.Errorf("callers of %q and %q both got job %d", o.Command, j.Command, j.ID)
		}
		want[j.ID] = j
	}
	checkAcked(t, s, want)
}

// ackOps returns the ack calls CreateJobAudited would queue for jobs with
// these commands, ready for runAcks.
func ackOps(t *testing.T, s *Store, commands ...string) []*writeOp {
	t.Helper()
	var ops []*writeOp
	for i, c := range commands {
		j, e, err := s.jobAudited(Job{Command: c, User: fmt.Sprintf("U%d", i)}, AuditEntry{Command: c, User: fmt.Sprintf("U%d", i), Decision: DecisionAccepted})
		if err != nil {
			t.Fatal(err)
		}
		op := ackOp(&ackRows{j: j, e: e})
		op.done = make(chan error, 1)
		ops = append(ops, op)
	}
	return ops
}

// A batch of acks in which PostgreSQL refuses one row: the others are
// committed, the caller of that row alone gets the database's error, and a
// call its caller abandoned is neither run nor answered.
func TestPostgresAckBatchOneRowFails(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	s := openURL(t, pgtest.Database(t))
	ops := ackOps(t, s, "mtp steps 1", badUTF8, "mtp steps 2", "abandoned", "mtp steps 3")
	ops[3].state.Store(opAbandoned)
	s.runAcks(ops)
	want := map[int64]Job{}
	for i, op := range ops {
		if i == 3 {
			select {
			case err := <-op.done:
				t.Errorf("the abandoned call ran: %v", err)
			default:
			}
			continue
		}
		err := <-op.done
		var pe *pgconn.PgError
		switch {
		case i == 1 && (!errors.As(err, &pe) || pe.Code != "22021"):
			t.Errorf("the bad row: %v, want PostgreSQL's invalid byte sequence (22021)", err)
		case i != 1 && err != nil:
			t.Errorf("call %d (%q): %v", i, op.ack.j.Command, err)
		case i != 1:
			j := op.ack.j
			j.ID = op.ack.id
			want[j.ID] = j
		}
	}
	checkAcked(t, s, want)
}

// The same through CreateJobAudited: callers queued together behind busy
// ackers, one of them with a row PostgreSQL refuses; only that one fails.
func TestPostgresAckQueuedRowFails(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	url := pgtest.Database(t)
	s := openURL(t, url)
	const callers, bad = 30, 17
	plug := plugAckers(t, s, url)
	got := make([]Job, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			c := fmt.Sprintf("mtp steps %d", i)
			if i == bad {
				c = badUTF8
			}
			got[i], errs[i] = s.CreateJobAudited(ctx, Job{Command: c, User: "U1"}, AuditEntry{Command: c, User: "U1", Decision: DecisionAccepted})
		})
	}
	plug.release(t)
	wg.Wait()
	want := map[int64]Job{}
	for i, err := range errs {
		if i == bad {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "22021" {
				t.Errorf("the bad row: %v, want PostgreSQL's invalid byte sequence (22021)", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
			continue
		}
		want[got[i].ID] = got[i]
	}
	checkAcked(t, s, want)
}

// doneWatch is a context that says when Done is first asked for: submit
// asks for it as it starts to wait.
type doneWatch struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// A CreateJobAudited call whose context ends while it waits for the (busy)
// ackers returns the context's error, and nothing of it is written, then or
// once the ackers are free.
func TestPostgresAckCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	url := pgtest.Database(t)
	s := openURL(t, url)
	plug := plugAckers(t, s, url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &doneWatch{Context: ctx, waiting: make(chan struct{})}
	result := make(chan error, 1)
	go func() {
		_, err := s.CreateJobAudited(w, Job{Command: "cancelled"}, AuditEntry{Decision: DecisionAccepted})
		result <- err
	}()
	<-w.waiting
	cancel()
	err := <-result
	plug.release(t)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("CreateJobAudited cancelled while queued = %v, want context.Canceled", err)
	}
	// A call after it goes through the same ackers: once it is answered,
	// the cancelled one would have been too.
	j, err := s.CreateJobAudited(context.Background(), Job{Command: "after"}, AuditEntry{Command: "after", Decision: DecisionAccepted})
	if err != nil {
		t.Fatal(err)
	}
	checkAcked(t, s, map[int64]Job{j.ID: j})
}

// A batch of acks whose statement runs out of StatementTimeout (the jobs
// table is locked) gives every call ErrUnreachable at once: the batch may
// yet be committed, and calls one by one would each wait out the timeout.
// The same for a database that refuses connections.
func TestPostgresAckBatchUnreachable(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	proxy, url := pgtest.NewProxy(t, pgtest.Database(t))
	s := openURL(t, url)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`LOCK TABLE jobs IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ops := ackOps(t, s, "mtp steps 1", "mtp steps 2", "mtp steps 3")
	before := s.Stats().Statements
	t0 := time.Now()
	s.runAcks(ops)
	took := time.Since(t0)
	_ = tx.Rollback()
	for i, op := range ops {
		if err := <-op.done; !errors.Is(err, ErrUnreachable) {
			t.Errorf("call %d: %v, want ErrUnreachable", i, err)
		}
	}
	if n := s.Stats().Statements - before; n != 1 || took > StatementTimeout+time.Second {
		t.Errorf("the timed-out batch ran %d statements in %s, want 1 within %s", n, took, StatementTimeout)
	}

	proxy.Cut()
	ops = ackOps(t, s, "mtp steps 4", "mtp steps 5", "mtp steps 6")
	before = s.Stats().Statements
	s.runAcks(ops)
	for i, op := range ops {
		if err := <-op.done; !IsRefusingWrites(err) {
			t.Errorf("call %d with the database away: %v, want a refused write", i, err)
		}
	}
	if n := s.Stats().Statements - before; n != 1 {
		t.Errorf("the refused batch ran %d statements, want 1", n)
	}
}

// Every column of a job and its audit entry comes back from the batch
// statement as CreateJobAudited was given it, awkward text included
// (quotes, backslashes, braces, commas, "NULL", empty, newlines, non-ASCII),
// NULLs (no result, no args, no schedule, no times), DryRun both ways, and
// times at and before the
// Unix epoch, exactly as from the single statement of a call alone.
func TestPostgresAckBatchValues(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	s := openURL(t, pgtest.Database(t))
	epoch, past := time.Unix(0, 0).UTC(), time.Unix(-86400, 5).UTC()
	odd := []string{`say "hi"`, `back\slash\\`, `{a,b}`, `NULL`, ``, " spaced  \n\tline ", `naïve ☃ 🎉`, `'quoted'`, `\"`, `,`}
	var jobs []Job
	var entries []AuditEntry
	for i, x := range odd {
		j := Job{Command: "cmd " + x, Platform: x, User: x, Room: x, Thread: x, Service: x, Host: x, Error: x, Owner: x}
		e := AuditEntry{Platform: x, User: x, Room: x, Command: x, Decision: "d " + x, Detail: x}
		switch i % 3 {
		case 0:
			j.Status, j.Result, j.ScheduleID = Succeeded, json.RawMessage(`{"x":"`+strings.ReplaceAll(strings.ReplaceAll(x, `\`, `\\`), `"`, `\"`)+`"}`), int64(i+1)
			j.CreatedAt, j.StartedAt, j.EndedAt = past, epoch, epoch.Add(time.Second)
		case 1:
			j.Status, j.CreatedAt, e.At = Running, epoch, past
		}
		// Args: JSON holding the awkward text, or none (NULL); DryRun both ways.
		if i%3 != 2 {
			xs := must(json.Marshal(x))(t)
			j.Args = json.RawMessage(`{"v":1,"command":"cmd","args":{"x":` + string(xs) + `}}`)
		}
		j.DryRun = i%2 == 0
		jobs, entries = append(jobs, j), append(entries, e)
	}
	// The same calls, alone (ackSQL) and as one batch (ackBatchSQL).
	var alone, batched []*writeOp
	for i := range jobs {
		for _, to := range []*[]*writeOp{&alone, &batched} {
			j, e, err := s.jobAudited(jobs[i], entries[i])
			if err != nil {
				t.Fatal(err)
			}
			op := ackOp(&ackRows{j: j, e: e})
			op.done = make(chan error, 1)
			*to = append(*to, op)
		}
	}
	for _, op := range alone {
		s.runAcks([]*writeOp{op})
	}
	before := s.Stats().Statements
	s.runAcks(batched)
	if n := s.Stats().Statements - before; n != 1 {
		t.Errorf("the batch ran as %d statements, want 1 (it failed, and its calls ran alone)", n)
	}
	for i := range jobs {
		for _, op := range []*writeOp{alone[i], batched[i]} {
			if err := <-op.done; err != nil {
				t.Fatalf("job %d: %v", i, err)
			}
		}
		got := make([]Job, 2)
		audits := make([][]AuditEntry, 2)
		for k, op := range []*writeOp{alone[i], batched[i]} {
			got[k] = must(s.Job(ctx, op.ack.id))(t)
			audits[k] = must(s.JobAudit(ctx, op.ack.id))(t)
			want := op.ack.j
			want.ID = op.ack.id
			if fmt.Sprintf("%+v", got[k]) != fmt.Sprintf("%+v", want) {
				t.Errorf("job %d stored as\n%+v\nwant\n%+v", i, got[k], want)
			}
			wantE := op.ack.e
			wantE.JobID = op.ack.id
			if len(audits[k]) != 1 {
				t.Fatalf("job %d has %d audit entries", i, len(audits[k]))
			}
			wantE.ID = audits[k][0].ID
			if fmt.Sprintf("%+v", audits[k][0]) != fmt.Sprintf("%+v", wantE) {
				t.Errorf("job %d's audit entry stored as\n%+v\nwant\n%+v", i, audits[k][0], wantE)
			}
		}
	}
}
