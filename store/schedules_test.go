package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func testSchedules(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	a, err := s.AddSchedule(ctx, Schedule{Spec: "0 3 * * *", Command: "sweep qwen steps 1..5", Platform: "matrix", Room: "!r:x", CreatedBy: "@ann:x"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.AddSchedule(ctx, Schedule{Spec: "CRON_TZ=Europe/Berlin 30 2 * * 1", Command: "bench qwen", Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID <= 0 || b.ID <= a.ID || a.CreatedAt.IsZero() {
		t.Fatalf("ids/time not set: %+v %+v", a, b)
	}
	all, err := s.Schedules(ctx)
	if err != nil || len(all) != 2 || all[0] != a || all[1] != b {
		t.Fatalf("Schedules = %+v, %v; want [%+v %+v]", all, err, a, b)
	}

	if err := s.SetSchedulePaused(ctx, a.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSchedulePaused(ctx, b.ID, false); err != nil {
		t.Fatal(err)
	}
	job := mustCreate(t, s, Job{Command: a.Command, ScheduleID: a.ID})
	run := time.Date(2026, 12, 3, 3, 0, 0, 5, time.UTC)
	if err := s.RecordScheduleRun(ctx, a.ID, run, job.ID); err != nil {
		t.Fatal(err)
	}
	got, err := s.Schedule(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Paused || got.LastJobID != job.ID {
		t.Errorf("after pause and run: %+v", got)
	}
	sameTime(t, "LastRunAt", got.LastRunAt, run)
	if got := must(s.Schedule(ctx, b.ID))(t); got.Paused || !got.LastRunAt.IsZero() {
		t.Errorf("b after resume: %+v", got)
	}
	if err := s.RecordScheduleRun(ctx, b.ID, run, 0); err != nil {
		t.Errorf("a run without a job: %v", err)
	}

	if err := s.RemoveSchedule(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Schedule(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Schedule(removed) = %v, want ErrNotFound", err)
	}
	if j := must(s.Job(ctx, job.ID))(t); j.ScheduleID != a.ID {
		t.Errorf("job lost its schedule id: %+v", j)
	}
	c := must(s.AddSchedule(ctx, Schedule{Spec: "@daily", Command: "gpu status"}))(t)
	if c.ID <= b.ID {
		t.Errorf("schedule id %d reused (after %d)", c.ID, b.ID)
	}
	// The highest id removed: still never reused.
	if err := s.RemoveSchedule(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if d := must(s.AddSchedule(ctx, Schedule{Spec: "@daily", Command: "gpu status"}))(t); d.ID <= c.ID {
		t.Errorf("schedule id %d reused after removing %d", d.ID, c.ID)
	}
}

func TestSchedules(t *testing.T) { t.Parallel(); eachDriver(t, testSchedules) }

func testSchedulesBadInputAndNotFound(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	for name, sc := range map[string]Schedule{
		"no spec":    {Command: "x"},
		"no command": {Spec: "@daily"},
		"has id":     {ID: 1, Spec: "@daily", Command: "x"},
		"has run":    {Spec: "@daily", Command: "x", LastJobID: 3},
	} {
		if _, err := s.AddSchedule(ctx, sc); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: AddSchedule = %v, want ErrInvalid", name, err)
		}
	}
	if n := count(t, s.rdb, "schedules"); n != 0 {
		t.Errorf("rejected schedules written: %d", n)
	}
	for name, err := range map[string]error{
		"Schedule":          func() error { _, err := s.Schedule(ctx, 9); return err }(),
		"RemoveSchedule":    s.RemoveSchedule(ctx, 9),
		"SetSchedulePaused": s.SetSchedulePaused(ctx, 9, true),
		"RecordScheduleRun": s.RecordScheduleRun(ctx, 9, time.Now(), 0),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s(missing) = %v, want ErrNotFound", name, err)
		}
	}
	sc := must(s.AddSchedule(ctx, Schedule{Spec: "@daily", Command: "x"}))(t)
	if err := s.RecordScheduleRun(ctx, sc.ID, time.Now(), 777); !errors.Is(err, ErrNotFound) {
		t.Errorf("RecordScheduleRun(missing job) = %v, want ErrNotFound", err)
	}
	if err := s.RecordScheduleRun(ctx, sc.ID, time.Time{}, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("RecordScheduleRun(zero time) = %v, want ErrInvalid", err)
	}
	if got := must(s.Schedule(ctx, sc.ID))(t); !got.LastRunAt.IsZero() {
		t.Errorf("failed RecordScheduleRun changed the schedule: %+v", got)
	}
}

func TestSchedulesBadInputAndNotFound(t *testing.T) {
	t.Parallel()
	eachDriver(t, testSchedulesBadInputAndNotFound)
}
