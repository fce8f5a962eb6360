package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func testEvents(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	j := mustCreate(t, s, Job{Command: "mtp steps 10"})
	other := mustCreate(t, s, Job{Command: "gpu status"})

	evs, err := s.Events(ctx, j.ID)
	if err != nil || evs == nil || len(evs) != 0 {
		t.Fatalf("Events of a job without events = %#v, %v; want an empty slice", evs, err)
	}
	at := time.Date(2026, 12, 2, 18, 0, 0, 1, time.FixedZone("X", -7*3600))
	in := []Event{
		{JobID: j.ID, At: at, Step: "stop", Status: "started", Message: "stopping sglang-qwen.service"},
		{JobID: j.ID, Seq: 99, Step: "stop", Status: "done"}, // Seq is assigned, not taken
		{JobID: other.ID, Step: "gpus", Status: "done"},
		{JobID: j.ID, Step: "reap", Status: "failed", Message: "PID 4242 in D state: needs GPU reset or reboot"},
	}
	for _, e := range in {
		if err := s.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	evs, err = s.Events(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("got %d events, want 3: %+v", len(evs), evs)
	}
	for i, want := range []Event{in[0], in[1], in[3]} {
		got := evs[i]
		if got.Seq != i+1 || got.JobID != j.ID || got.Step != want.Step || got.Status != want.Status || got.Message != want.Message {
			t.Errorf("event %d = %+v, want %+v with seq %d", i, got, want, i+1)
		}
	}
	sameTime(t, "event time", evs[0].At, at)
	if evs[1].At.IsZero() {
		t.Error("a zero event time was not set to now")
	}
	if oe := must(s.Events(ctx, other.ID))(t); len(oe) != 1 || oe[0].Seq != 1 {
		t.Errorf("other job's events = %+v, want one with seq 1", oe)
	}

	if err := s.AppendEvent(ctx, Event{JobID: 0}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AppendEvent(job 0) = %v, want ErrInvalid", err)
	}
	if err := s.AppendEvent(ctx, Event{JobID: j.ID, At: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AppendEvent(year 3000) = %v, want ErrInvalid", err)
	}
}

func TestEvents(t *testing.T) { t.Parallel(); eachDriver(t, testEvents) }

// TestEventSeqConcurrent appends to one job from many goroutines and two
// Store values on the same file: the sequence is 1..n without repeats.
func TestEventSeqConcurrent(t *testing.T) { t.Parallel(); eachDriver(t, testEventSeqConcurrent) }

// Two stores (two processes) on one database append to one job at once.
func testEventSeqConcurrent(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	a := drv.openAt(t, path)
	b := drv.openAt(t, path)
	j := mustCreate(t, a, Job{Command: "sweep steps 1..5"})
	const goroutines, each = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Go(func() {
			for range each {
				if err := s.AppendEvent(ctx, Event{JobID: j.ID, Step: "bench"}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("AppendEvent: %v", err)
	}
	evs, err := b.Events(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != goroutines*each {
		t.Fatalf("got %d events, want %d", len(evs), goroutines*each)
	}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}
