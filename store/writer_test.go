package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func testWriteCancelledBeforeStart(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.CreateJob(ctx, Job{Command: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateJob(cancelled ctx) = %v, want context.Canceled", err)
	}
	if n := count(t, s.rdb, "jobs"); n != 0 {
		t.Errorf("a cancelled call wrote %d rows", n)
	}
}

func TestWriteCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	eachDriver(t, testWriteCancelledBeforeStart)
}

func TestClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir()+"/c.db")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := s.CreateJob(ctx, Job{Command: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateJob after Close = %v, want ErrClosed", err)
	}
}

func TestOpenBadPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := Open(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(\"\") = %v, want ErrInvalid", err)
	}
	dir := t.TempDir()
	if _, err := Open(ctx, dir); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(directory) = %v, want ErrInvalid", err)
	}
	// Awkward characters in the path survive the URI form of the DSN.
	odd := dir + "/we?ird #dir%41/ops bot.db"
	s := openAt(t, odd)
	mustCreate(t, s, Job{Command: "x"})
	if s.Path() != odd {
		t.Errorf("Path = %q, want %q", s.Path(), odd)
	}
	if _, err := rawDB(t, odd).Exec(`SELECT 1 FROM jobs`); err != nil {
		t.Errorf("the file is not where asked: %v", err)
	}
}

// TestBatchIsolation runs one transaction holding a good call, a failing
// call and a panicking call, as the writer batches them: only the good
// call's row is committed and each caller gets its own outcome.
func TestBatchIsolation(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	insert := func(cmd string) func(tx *wtx) error {
		return func(tx *wtx) error {
			_, err := tx.ExecContext(context.Background(), `INSERT INTO jobs (command, status, created_at) VALUES (?, 'queued', 0)`, cmd)
			return err
		}
	}
	boom := errors.New("boom")
	ops := []*writeOp{
		{fn: insert("good 1")},
		{fn: func(tx *wtx) error { _ = insert("bad")(tx); return boom }},
		{fn: func(tx *wtx) error { _ = insert("panic")(tx); panic("kaboom") }},
		{fn: insert("abandoned")},
		{fn: insert("")}, // violates the CHECK constraint
		{fn: insert("good 2")},
	}
	for _, op := range ops {
		op.done = make(chan error, 1)
	}
	ops[3].state.Store(opAbandoned)
	tx, err := s.wdb.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.runBatch(context.Background(), tx, ops)
	outcome := func(i int) error { return <-ops[i].done }
	if err := outcome(0); err != nil {
		t.Errorf("good call: %v", err)
	}
	if err := outcome(1); !errors.Is(err, boom) {
		t.Errorf("failing call: %v", err)
	}
	if err := outcome(2); err == nil || !strings.Contains(err.Error(), "kaboom") {
		t.Errorf("panicking call: %v", err)
	}
	select {
	case err := <-ops[3].done:
		t.Errorf("abandoned call ran: %v", err)
	default:
	}
	if err := outcome(4); err == nil {
		t.Error("constraint violation not reported")
	}
	if err := outcome(5); err != nil {
		t.Errorf("good call after failures: %v", err)
	}
	rows, err := s.rdb.Query(`SELECT command FROM jobs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[good 1 good 2]" {
		t.Errorf("committed rows = %q, want [good 1 good 2]", got)
	}
}

// TestBatchOneStatement does the same for calls that run without their own
// savepoint (write1): a constraint violation undoes only that statement.
func TestBatchOneStatement(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	insert := func(cmd string) func(tx *wtx) error {
		return func(tx *wtx) error {
			_, err := tx.ExecContext(context.Background(), `INSERT INTO jobs (command, status, created_at) VALUES (?, 'queued', 0)`, cmd)
			return err
		}
	}
	ops := []*writeOp{
		{fn: insert("good 1"), one: true},
		{fn: insert(""), one: true}, // CHECK violation
		{fn: func(tx *wtx) error { return ErrNotFound }, one: true},
		{fn: insert("good 2"), one: true},
	}
	for _, op := range ops {
		op.done = make(chan error, 1)
	}
	tx, err := s.wdb.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.runBatch(context.Background(), tx, ops)
	for i, wantErr := range []bool{false, true, true, false} {
		if err := <-ops[i].done; (err != nil) != wantErr {
			t.Errorf("op %d: err = %v, want error %v", i, err, wantErr)
		}
	}
	if n := count(t, s.rdb, "jobs"); n != 2 {
		t.Errorf("committed %d jobs, want 2", n)
	}

	// A panic may leave a half-done call behind: the whole batch is
	// abandoned and every caller told so.
	ops = []*writeOp{
		{fn: insert("lost 1"), one: true},
		{fn: func(tx *wtx) error { _ = insert("half")(tx); panic("kaboom") }, one: true},
		{fn: insert("never run"), one: true},
	}
	for _, op := range ops {
		op.done = make(chan error, 1)
	}
	tx, err = s.wdb.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.runBatch(context.Background(), tx, ops)
	for i := range ops {
		if err := <-ops[i].done; err == nil {
			t.Errorf("op %d of the abandoned batch reported success", i)
		}
	}
	if n := count(t, s.rdb, "jobs"); n != 2 {
		t.Errorf("abandoned batch left rows: %d jobs, want 2", n)
	}
}

// TestConcurrentMixedWrites drives the writer with many goroutines whose
// calls fail and succeed in mixed order; every good call lands and no bad
// call leaves a trace.
func testConcurrentMixedWrites(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	const goroutines, each = 20, 30
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				j, err := s.CreateJob(ctx, Job{Command: fmt.Sprintf("g%d i%d", g, i)})
				if err != nil {
					errs <- err
					continue
				}
				if err := s.FinishJob(ctx, j.ID, Succeeded, "", nil); err != nil {
					errs <- err
				}
				// Always refused: the job is final.
				if err := s.StartJob(ctx, j.ID); !errors.As(err, new(*TransitionError)) {
					errs <- fmt.Errorf("StartJob(finished) = %v", err)
				}
				if err := s.AppendEvent(ctx, Event{JobID: j.ID + 1_000_000}); !errors.Is(err, ErrNotFound) {
					errs <- fmt.Errorf("AppendEvent(missing) = %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var total, done int
	if err := s.rdb.QueryRow(`SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 'succeeded') FROM jobs`).Scan(&total, &done); err != nil {
		t.Fatal(err)
	}
	if total != goroutines*each || done != total {
		t.Errorf("jobs: %d total, %d succeeded; want %d both", total, done, goroutines*each)
	}
	if n := count(t, s.rdb, "job_events"); n != 0 {
		t.Errorf("failed calls left %d events", n)
	}
}

func TestConcurrentMixedWrites(t *testing.T) { t.Parallel(); eachDriver(t, testConcurrentMixedWrites) }

// TestCloseWhileWriting closes the store under load: every call returns,
// either committed (nil) or refused with ErrClosed, and what returned nil
// is in the file.
func TestCloseWhileWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/close.db"
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok int
	started := make(chan struct{}, 20)
	for range 20 {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := s.CreateJob(ctx, Job{Command: "x"})
				if i == 0 {
					started <- struct{}{}
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("CreateJob: %v", err)
					return
				}
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	for range 20 {
		<-started
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := count(t, rawDB(t, path), "jobs"); n != ok {
		t.Errorf("%d calls succeeded but %d jobs are stored", ok, n)
	}
}
