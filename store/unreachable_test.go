package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/testkit"
)

// PostgreSQL taken away under an open store: writes fail within
// StatementTimeout as refused writes (IsRefusingWrites, WriteHealth and
// Ping name the store), nothing is half-written; once the database is
// back the same Store takes writes again, without a reopen.
func TestPostgresUnreachableAndBack(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	proxy, url := pgtest.NewProxy(t, pgtest.Database(t))
	s := openURL(t, url)
	if _, err := s.CreateJob(ctx, Job{Command: "status"}); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	t0 := time.Now()
	_, err := s.CreateJob(ctx, Job{Command: "mtp steps 3"})
	if took := time.Since(t0); err == nil || !IsRefusingWrites(err) || took > StatementTimeout+time.Second {
		t.Fatalf("a write with the database away: %v after %s; want a refused write within %s", err, took, StatementTimeout)
	}
	if err := s.WriteHealth(); !errors.Is(err, ErrRefusingWrites) {
		t.Errorf("WriteHealth = %v, want ErrRefusingWrites", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = s.Ping(pctx)
	cancel()
	if err == nil || !containsAll(err.Error(), "store postgres 127.0.0.1:") {
		t.Errorf("Ping with the database away = %v, want it to name the store", err)
	}
	if st := s.Stats(); st.Errors == 0 {
		t.Errorf("Stats counts no errors: %+v", st)
	}
	proxy.Restore()
	if !testkit.Poll(15*time.Second, func() bool {
		_, err = s.CreateJob(ctx, Job{Command: "mtp steps 4"})
		return err == nil
	}) {
		t.Fatalf("the store does not take writes again once the database is back: %v", err)
	}
	jobs, err := s.ListJobs(ctx, JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Errorf("%d jobs, want 2 (the refused write left nothing): %+v", len(jobs), jobs)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// RefuseWrites takes a SQLite store's writes away as a read-only database
// does: every write is a refusal (IsRefusingWrites), reads go on, nothing
// is half-written; RefuseWrites(false) gives them back.
func TestRefuseWritesAndBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	j, err := s.CreateJob(ctx, Job{Command: "status"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RefuseWrites(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, Event{JobID: j.ID, Step: "stop", Status: "done"}); !IsRefusingWrites(err) {
		t.Errorf("an event with writes refused: %v; want a refusal", err)
	}
	if _, err := s.EndJob(ctx, j.ID, Ending{Status: Succeeded}); !IsRefusingWrites(err) {
		t.Errorf("a job's end with writes refused: %v; want a refusal", err)
	}
	if got, err := s.Job(ctx, j.ID); err != nil || got.Status != Queued {
		t.Errorf("a read with writes refused: %+v, %v", got, err)
	}
	if err := s.RefuseWrites(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, Event{JobID: j.ID, Step: "stop", Status: "done"}); err != nil {
		t.Fatalf("an event once writes are back: %v", err)
	}
	if evs, err := s.Events(ctx, j.ID); err != nil || len(evs) != 1 {
		t.Errorf("events %+v, %v; want the one written once writes are back", evs, err)
	}
}

// RefuseWrites while other writes are queued (it needs the write
// connection outside any transaction, so it is never batched with them):
// each call returns, and the writes go on once writes are back.
func TestRefuseWritesAmidWrites(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openTemp(t)
	j, err := s.CreateJob(ctx, Job{Command: "status"})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = s.AppendEvent(ctx, Event{JobID: j.ID, Step: "x", Status: "done"})
			}
		}()
	}
	for i := range 20 {
		if err := s.RefuseWrites(ctx, i%2 == 0); err != nil {
			t.Fatalf("RefuseWrites %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	if err := s.AppendEvent(ctx, Event{JobID: j.ID, Step: "y", Status: "done"}); err != nil {
		t.Fatalf("a write once writes are back: %v", err)
	}
}
