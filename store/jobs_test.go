package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestStatusFinal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s            Status
		final, valid bool
	}{
		{Queued, false, true}, {Running, false, true},
		{Succeeded, true, true}, {Failed, true, true}, {Cancelled, true, true},
		{Refused, true, true}, {Interrupted, true, true},
		{"", false, false}, {"done", false, false}, {"Queued", false, false},
	} {
		if got := tc.s.Final(); got != tc.final {
			t.Errorf("%q.Final() = %v, want %v", tc.s, got, tc.final)
		}
		if got := tc.s.Valid(); got != tc.valid {
			t.Errorf("%q.Valid() = %v, want %v", tc.s, got, tc.valid)
		}
	}
}

func testJobRoundTrip(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	created := time.Date(2026, 12, 2, 18, 0, 0, 123456789, time.FixedZone("CET", 3600))
	in := Job{
		Command: "mtp steps 10 qwen", Platform: "slack", User: "U1", Room: "C1", Thread: "1.2",
		Service: "qwen", Host: "gpu1", Result: json.RawMessage(`{"a":[1,2]}`), ScheduleID: 7, CreatedAt: created,
		Args: json.RawMessage(`{"v":1,"command":"mtp steps","args":{"steps":10,"service":"qwen"}}`), DryRun: true,
	}
	j, err := s.CreateJob(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID <= 0 || j.Status != Queued {
		t.Fatalf("created %+v: want an ID and status queued", j)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	sameTime(t, "CreatedAt", got.CreatedAt, created)
	if got.CreatedAt.Nanosecond() != 123456789 {
		t.Errorf("nanoseconds lost: %v", got.CreatedAt)
	}
	if !got.StartedAt.IsZero() || !got.EndedAt.IsZero() {
		t.Errorf("a queued job has start/end times: %+v", got)
	}
	want := in
	want.ID, want.Status = j.ID, Queued
	got.CreatedAt, want.CreatedAt = time.Time{}, time.Time{}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("read back\n got %+v\nwant %+v", got, want)
	}

	// Default CreatedAt is now, in UTC.
	before := time.Now()
	j2 := mustCreate(t, s, Job{Command: "gpu status"})
	if j2.CreatedAt.Before(before.Add(-time.Second)) || j2.CreatedAt.After(time.Now().Add(time.Second)) || j2.CreatedAt.Location() != time.UTC {
		t.Errorf("default CreatedAt = %v, want about now in UTC", j2.CreatedAt)
	}
	if j2.ID <= j.ID {
		t.Errorf("IDs not increasing: %d then %d", j.ID, j2.ID)
	}
	if got := must(s.Job(ctx, j2.ID))(t); got.Result != nil || got.ScheduleID != 0 || got.Args != nil || got.DryRun {
		t.Errorf("unset Result/ScheduleID/Args/DryRun read back as %q/%d/%q/%v", got.Result, got.ScheduleID, got.Args, got.DryRun)
	}
}

func TestJobRoundTrip(t *testing.T) { t.Parallel(); eachDriver(t, testJobRoundTrip) }

func testCreateJobRejectsBadInput(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	for name, j := range map[string]Job{
		"empty command":  {},
		"blank command":  {Command: " \t"},
		"unknown status": {Command: "x", Status: "done"},
		"bad result":     {Command: "x", Result: json.RawMessage(`{"a":`)},
		"has an id":      {Command: "x", ID: 5},
		"neg schedule":   {Command: "x", ScheduleID: -1},
		"time too late":  {Command: "x", CreatedAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		"time too early": {Command: "x", CreatedAt: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if _, err := s.CreateJob(ctx, j); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: CreateJob error = %v, want ErrInvalid", name, err)
		}
	}
	if n := count(t, s.rdb, "jobs"); n != 0 {
		t.Errorf("rejected jobs were written: %d rows", n)
	}
}

func TestCreateJobRejectsBadInput(t *testing.T) {
	t.Parallel()
	eachDriver(t, testCreateJobRejectsBadInput)
}

func testCreateJobInFinalOrRunningState(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	r := mustCreate(t, s, Job{Command: "mtp steps 10", Status: Refused, Error: "needs operator"})
	if !r.EndedAt.Equal(r.CreatedAt) {
		t.Errorf("refused job EndedAt = %v, want CreatedAt %v", r.EndedAt, r.CreatedAt)
	}
	if err := s.StartJob(ctx, r.ID); !isTransition(err, Refused, Running) {
		t.Errorf("StartJob(refused) = %v, want TransitionError refused->running", err)
	}
	run := mustCreate(t, s, Job{Command: "bench", Status: Running})
	if !run.StartedAt.Equal(run.CreatedAt) || !run.EndedAt.IsZero() {
		t.Errorf("running job times: %+v", run)
	}
	if err := s.FinishJob(ctx, run.ID, Succeeded, "", nil); err != nil {
		t.Errorf("FinishJob(running) = %v", err)
	}
}

func TestCreateJobInFinalOrRunningState(t *testing.T) {
	t.Parallel()
	eachDriver(t, testCreateJobInFinalOrRunningState)
}

func isTransition(err error, from, to Status) bool {
	var te *TransitionError
	return errors.As(err, &te) && te.From == from && te.To == to
}

func testJobTransitions(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)

	j := mustCreate(t, s, Job{Command: "mtp steps 10"})
	if err := s.StartJob(ctx, j.ID); err != nil {
		t.Fatalf("StartJob(queued) = %v", err)
	}
	if err := s.StartJob(ctx, j.ID); !isTransition(err, Running, Running) {
		t.Errorf("StartJob(running) = %v, want TransitionError running->running", err)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil {
		t.Fatalf("Job(%d): %v", j.ID, err)
	}
	if got.Status != Running || got.StartedAt.IsZero() || got.StartedAt.Before(got.CreatedAt) {
		t.Errorf("after start: %+v", got)
	}
	res := json.RawMessage(`{"incidents":["restart_loop"]}`)
	if err := s.FinishJob(ctx, j.ID, Succeeded, "", res); err != nil {
		t.Fatalf("FinishJob(running) = %v", err)
	}
	if err := s.FinishJob(ctx, j.ID, Failed, "late", nil); !isTransition(err, Succeeded, Failed) {
		t.Errorf("FinishJob twice = %v, want TransitionError succeeded->failed", err)
	}
	if err := s.StartJob(ctx, j.ID); !isTransition(err, Succeeded, Running) {
		t.Errorf("StartJob(finished) = %v, want TransitionError succeeded->running", err)
	}
	if got, err = s.Job(ctx, j.ID); err != nil {
		t.Fatalf("Job(%d): %v", j.ID, err)
	}
	if got.Status != Succeeded || string(got.Result) != string(res) || got.Error != "" || got.EndedAt.Before(got.StartedAt) {
		t.Errorf("finished job changed by refused transitions or wrong: %+v", got)
	}

	// A queued job can be finished directly (cancelled before it ran).
	q := mustCreate(t, s, Job{Command: "bench"})
	if err := s.FinishJob(ctx, q.ID, Cancelled, "cancelled by U2", nil); err != nil {
		t.Fatalf("FinishJob(queued) = %v", err)
	}
	if got, err = s.Job(ctx, q.ID); err != nil {
		t.Fatalf("Job(%d): %v", q.ID, err)
	}
	if got.Status != Cancelled || got.Error != "cancelled by U2" || got.EndedAt.IsZero() || !got.StartedAt.IsZero() {
		t.Errorf("cancelled queued job: %+v", got)
	}

	// Bad arguments change nothing.
	r := mustCreate(t, s, Job{Command: "gpu recover"})
	for _, st := range []Status{Queued, Running, "", "bogus"} {
		if err := s.FinishJob(ctx, r.ID, st, "", nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("FinishJob(%q) = %v, want ErrInvalid", st, err)
		}
	}
	if err := s.FinishJob(ctx, r.ID, Failed, "", json.RawMessage("nope")); !errors.Is(err, ErrInvalid) {
		t.Errorf("FinishJob(bad JSON) = %v, want ErrInvalid", err)
	}
	if got := must(s.Job(ctx, r.ID))(t); got.Status != Queued {
		t.Errorf("rejected FinishJob changed the job: %+v", got)
	}
}

func TestJobTransitions(t *testing.T) { t.Parallel(); eachDriver(t, testJobTransitions) }

func testJobNotFound(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	const id = 4242
	var te *TransitionError
	for name, err := range map[string]error{
		"Job":          func() error { _, err := s.Job(ctx, id); return err }(),
		"StartJob":     s.StartJob(ctx, id),
		"FinishJob":    s.FinishJob(ctx, id, Failed, "", nil),
		"SetJobThread": s.SetJobThread(ctx, id, "t"),
		"AppendEvent":  s.AppendEvent(ctx, Event{JobID: id}),
		"Events":       func() error { _, err := s.Events(ctx, id); return err }(),
	} {
		if !errors.Is(err, ErrNotFound) || errors.As(err, &te) {
			t.Errorf("%s(missing) = %v, want ErrNotFound", name, err)
		}
	}
}

func TestJobNotFound(t *testing.T) { t.Parallel(); eachDriver(t, testJobNotFound) }

func testSetJobThread(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	j := mustCreate(t, s, Job{Command: "jobs", Status: Succeeded})
	if err := s.SetJobThread(ctx, j.ID, "1733160000.000100"); err != nil {
		t.Fatal(err)
	}
	if got := must(s.Job(ctx, j.ID))(t); got.Thread != "1733160000.000100" || got.Status != Succeeded {
		t.Errorf("thread not set: %+v", got)
	}
}

func TestSetJobThread(t *testing.T) { t.Parallel(); eachDriver(t, testSetJobThread) }

func testListJobs(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	var ids []int64
	for i, spec := range []struct {
		svc, user string
		st        Status
	}{
		{"qwen", "U1", Queued}, {"llama", "U2", Running}, {"qwen", "U2", Succeeded},
		{"qwen", "U1", Running}, {"llama", "U1", Failed},
	} {
		j := mustCreate(t, s, Job{Command: fmt.Sprintf("cmd %d", i), Service: spec.svc, User: spec.user, Status: spec.st})
		ids = append(ids, j.ID)
	}
	for _, tc := range []struct {
		name string
		f    JobFilter
		want []int64
	}{
		{"all", JobFilter{}, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{"active", JobFilter{Active: true}, []int64{ids[3], ids[1], ids[0]}},
		{"service", JobFilter{Service: "qwen"}, []int64{ids[3], ids[2], ids[0]}},
		{"active service", JobFilter{Active: true, Service: "llama"}, []int64{ids[1]}},
		{"user", JobFilter{User: "U2"}, []int64{ids[2], ids[1]}},
		{"limit", JobFilter{Limit: 2}, []int64{ids[4], ids[3]}},
		{"none", JobFilter{Service: "nope"}, nil},
	} {
		jobs, err := s.ListJobs(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []int64
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: ListJobs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestListJobs(t *testing.T) { t.Parallel(); eachDriver(t, testListJobs) }

func testInterruptUnfinished(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	q := mustCreate(t, s, Job{Command: "a"})
	r := mustCreate(t, s, Job{Command: "b"})
	if err := s.StartJob(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	done := mustCreate(t, s, Job{Command: "c"})
	if err := s.FinishJob(ctx, done.ID, Failed, "boom", nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.InterruptUnfinished(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != q.ID || got[1].ID != r.ID {
		t.Fatalf("InterruptUnfinished = %+v, want jobs %d and %d", got, q.ID, r.ID)
	}
	for _, j := range got {
		if j.Status != Interrupted || j.Error != InterruptedMessage || j.EndedAt.IsZero() {
			t.Errorf("returned job not interrupted: %+v", j)
		}
		stored := must(s.Job(ctx, j.ID))(t)
		if stored.Status != Interrupted {
			t.Errorf("stored job %d is %s", j.ID, stored.Status)
		}
	}
	if got[1].StartedAt.IsZero() {
		t.Errorf("interrupted running job lost its start time")
	}
	if d := must(s.Job(ctx, done.ID))(t); d.Status != Failed || d.Error != "boom" {
		t.Errorf("finished job touched: %+v", d)
	}
	again, err := s.InterruptUnfinished(ctx, nil)
	if err != nil || len(again) != 0 {
		t.Errorf("second InterruptUnfinished = %v, %v; want none", again, err)
	}
	if err := s.FinishJob(ctx, r.ID, Succeeded, "", nil); !isTransition(err, Interrupted, Succeeded) {
		t.Errorf("finishing an interrupted job = %v, want TransitionError", err)
	}
}

func TestInterruptUnfinished(t *testing.T) { t.Parallel(); eachDriver(t, testInterruptUnfinished) }

// TestConcurrentTransitions races many goroutines to start and finish the
// same jobs: exactly one wins each transition.
func testConcurrentTransitions(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	const jobs, racers = 20, 8
	var ids []int64
	for i := range jobs {
		ids = append(ids, mustCreate(t, s, Job{Command: fmt.Sprint("job ", i)}).ID)
	}
	var mu sync.Mutex
	starts, finishes := map[int64]int{}, map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, jobs*racers*2)
	for range racers {
		wg.Go(func() {
			for _, id := range ids {
				err := s.StartJob(ctx, id)
				if err == nil {
					mu.Lock()
					starts[id]++
					mu.Unlock()
				} else if !isTransition(err, Running, Running) && !errors.As(err, new(*TransitionError)) {
					errs <- err
				}
				err = s.FinishJob(ctx, id, Succeeded, "", nil)
				if err == nil {
					mu.Lock()
					finishes[id]++
					mu.Unlock()
				} else if !errors.As(err, new(*TransitionError)) {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	for _, id := range ids {
		if finishes[id] != 1 || starts[id] > 1 {
			t.Errorf("job %d: started %d times, finished %d times; want at most 1 and exactly 1", id, starts[id], finishes[id])
		}
	}
}

func TestConcurrentTransitions(t *testing.T) { t.Parallel(); eachDriver(t, testConcurrentTransitions) }

// InterruptUnfinished gives each job it ends the text why makes of the job
// and its events (oldest first): what the store knows of how far it got.
func testInterruptUnfinishedSaysWhy(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	q := mustCreate(t, s, Job{Command: "a"})
	r := mustCreate(t, s, Job{Command: "b"})
	if err := s.StartJob(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Event{{Step: "stop", Status: "done", Message: "stopped"}, {Step: "start", Status: "done", Message: "active (PID 13)"}} {
		e.JobID = r.ID
		if err := s.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	why := func(j Job, evs []Event) string {
		if len(evs) == 0 {
			return fmt.Sprintf("%s %s: nothing recorded", j.Command, j.Status)
		}
		last := evs[len(evs)-1]
		return fmt.Sprintf("%s %s: %d events, last %s: %s", j.Command, j.Status, len(evs), last.Step, last.Message)
	}
	got, err := s.InterruptUnfinished(ctx, why)
	if err != nil || len(got) != 2 {
		t.Fatalf("InterruptUnfinished = %+v, %v", got, err)
	}
	want := map[int64]string{q.ID: "a queued: nothing recorded", r.ID: "b running: 2 events, last start: active (PID 13)"}
	for _, j := range got {
		stored := must(s.Job(ctx, j.ID))(t)
		if j.Error != want[j.ID] || stored.Error != want[j.ID] || stored.Status != Interrupted {
			t.Errorf("job %d: returned %q, stored %s %q; want %q", j.ID, j.Error, stored.Status, stored.Error, want[j.ID])
		}
	}
}

func TestInterruptUnfinishedSaysWhy(t *testing.T) {
	t.Parallel()
	eachDriver(t, testInterruptUnfinishedSaysWhy)
}

// EndJob records the end time it is given, not the time of the write; a
// job another process marked interrupted meanwhile gets the real outcome,
// late; a job already ended otherwise is left alone.
func testEndJob(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	ended := time.Now().Add(-42 * time.Second).UTC().Round(time.Microsecond)
	j := mustCreate(t, s, Job{Command: "mtp steps 8"})
	if err := s.StartJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	late, err := s.EndJob(ctx, j.ID, Ending{Status: Succeeded, Result: []byte(`{"summary":"ok"}`), At: ended})
	if err != nil || late {
		t.Fatalf("EndJob = %v, %v", late, err)
	}
	got := must(s.Job(ctx, j.ID))(t)
	if got.Status != Succeeded || !got.EndedAt.Equal(ended) || string(got.Result) != `{"summary":"ok"}` || got.RecordedLate {
		t.Errorf("after EndJob: %s ended %s (want %s), result %s, late %v", got.Status, got.EndedAt, ended, got.Result, got.RecordedLate)
	}
	// Tried again (its commit's answer lost): nothing changes, no error.
	if late, err := s.EndJob(ctx, j.ID, Ending{Status: Succeeded, Result: []byte(`{"summary":"ok"}`), At: ended}); err != nil || late {
		t.Errorf("EndJob of the same end again = %v, %v; want nil", late, err)
	}
	if _, err := s.EndJob(ctx, j.ID, Ending{Status: Succeeded, At: ended.Add(time.Second)}); !isTransition(err, Succeeded, Succeeded) {
		t.Errorf("EndJob of another end = %v, want TransitionError", err)
	}
	if _, err := s.EndJob(ctx, j.ID, Ending{Status: Failed}); !isTransition(err, Succeeded, Failed) {
		t.Errorf("ending an ended job = %v, want TransitionError", err)
	}

	k := mustCreate(t, s, Job{Command: "mtp steps 9"})
	if err := s.FinishJob(ctx, k.ID, Interrupted, InterruptedMessage, nil); err != nil {
		t.Fatal(err)
	}
	late, err = s.EndJob(ctx, k.ID, Ending{Status: Failed, Error: "boom", At: ended})
	if err != nil || !late {
		t.Fatalf("EndJob of an interrupted job = %v, %v; want late", late, err)
	}
	got = must(s.Job(ctx, k.ID))(t)
	if got.Status != Failed || got.Error != "boom" || !got.RecordedLate || !got.EndedAt.Equal(ended) {
		t.Errorf("after a late EndJob: %+v", got)
	}
	if _, err := s.EndJob(ctx, k.ID, Ending{Status: Running}); !errors.Is(err, ErrInvalid) {
		t.Errorf("EndJob to running = %v, want ErrInvalid", err)
	}
}

func TestEndJob(t *testing.T) { t.Parallel(); eachDriver(t, testEndJob) }

// The Once writes, for a record tried again after a write whose outcome is
// unknown: a second try adds nothing; a first one adds as the plain write
// does; a missing job is still an error.
func testWritesOnce(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	j := mustCreate(t, s, Job{Command: "mtp steps 8", Service: "qwen"})
	at := time.Now().UTC()
	e := Event{JobID: j.ID, At: at, Step: "start", Status: "done", Message: "active (PID 13)"}
	for range 2 {
		if err := s.AppendEventOnce(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	e.At = at.Add(time.Nanosecond)
	if err := s.AppendEventOnce(ctx, e); err != nil {
		t.Fatal(err)
	}
	if evs := must(s.Events(ctx, j.ID))(t); len(evs) != 2 {
		t.Errorf("%d events after the same one twice and another, want 2: %+v", len(evs), evs)
	}
	if err := s.AppendEventOnce(ctx, Event{JobID: j.ID + 100, At: at}); !errors.Is(err, ErrNotFound) {
		t.Errorf("AppendEventOnce to a missing job = %v, want ErrNotFound", err)
	}
	if err := s.AppendEventOnce(ctx, Event{JobID: j.ID}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AppendEventOnce without a time = %v, want ErrInvalid", err)
	}
	r := BenchResult{JobID: j.ID, Service: "qwen", Settings: "steps=8", At: at, OutputTokS: 480, Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 48}
	first := must(s.AddBenchResultOnce(ctx, r))(t)
	again := must(s.AddBenchResultOnce(ctx, r))(t)
	r.Concurrency = 4
	other := must(s.AddBenchResultOnce(ctx, r))(t)
	if again.ID != first.ID || other.ID == first.ID {
		t.Errorf("ids %d, %d (again), %d (another load); want the same row again, a new one for the other", first.ID, again.ID, other.ID)
	}
	if rows := must(s.BenchHistory(ctx, "qwen", 10))(t); len(rows) != 2 {
		t.Errorf("%d rows, want 2", len(rows))
	}
	if _, err := s.AddBenchResultOnce(ctx, BenchResult{Service: "qwen", Settings: "steps=8", At: at}); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddBenchResultOnce without a job = %v, want ErrInvalid", err)
	}
}

func TestWritesOnce(t *testing.T) { t.Parallel(); eachDriver(t, testWritesOnce) }
