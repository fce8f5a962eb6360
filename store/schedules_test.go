package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
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

// TestScheduleFiringRows: a firing is claimed by the (schedule, fire time)
// row of schedule_firings, stamped with the claimer's owner. Two processes
// (Stores on one store, each its own owner) claiming one firing at once:
// exactly one wins and the row names it; different fire times both win,
// one row each. The row is the claim: a firing whose row exists is refused
// even though FiredAt is behind it. Prune deletes the rows before its
// cutoff (FiredAt still refuses those firings), and removing the schedule
// removes its rows.
func TestScheduleFiringRows(t *testing.T) { t.Parallel(); eachDriver(t, testScheduleFiringRows) }

func testScheduleFiringRows(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	a, b := drv.openAt(t, path), drv.openAt(t, path)
	must(a.RegisterOwner(ctx, Owner{ID: "owner-a", Host: "host1", PID: 11}, time.Minute))(t)
	must(b.RegisterOwner(ctx, Owner{ID: "owner-b", Host: "host2", PID: 22}, time.Minute))(t)
	sc := must(a.AddSchedule(ctx, Schedule{Spec: "* * * * *", Command: "status"}))(t)
	base := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)

	// One firing, two claimers at once, over several rounds.
	want := map[int64]string{} // fire_at -> the winner's owner
	for round := range 5 {
		f := base.Add(time.Duration(round) * time.Minute)
		var wg sync.WaitGroup
		won := make([]bool, 2)
		for i, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := s.ClaimFiring(ctx, sc.ID, f, f.Add(time.Minute))
				if err != nil {
					t.Error(err)
				}
				won[i] = ok
			}()
		}
		wg.Wait()
		if won[0] == won[1] {
			t.Fatalf("round %d: claims %v, want exactly one", round, won)
		}
		want[f.UnixNano()] = map[bool]string{true: "owner-a", false: "owner-b"}[won[0]]
	}
	// Different fire times: each claimer wins its own.
	f5, f6 := base.Add(5*time.Minute), base.Add(6*time.Minute)
	if ok, err := a.ClaimFiring(ctx, sc.ID, f5, f6); !ok || err != nil {
		t.Fatalf("a's claim of a new firing: %v %v", ok, err)
	}
	if ok, err := b.ClaimFiring(ctx, sc.ID, f6, f6.Add(time.Minute)); !ok || err != nil {
		t.Fatalf("b's claim of the next firing: %v %v", ok, err)
	}
	want[f5.UnixNano()], want[f6.UnixNano()] = "owner-a", "owner-b"
	rows := must(a.Firings(ctx, sc.ID))(t)
	if len(rows) != len(want) {
		t.Fatalf("%d firing rows, want %d: %+v", len(rows), len(want), rows)
	}
	for _, r := range rows {
		if r.ScheduleID != sc.ID || want[r.At.UnixNano()] != r.ClaimedBy || r.ClaimedAt.IsZero() {
			t.Errorf("firing row %+v, want claimed by %q", r, want[r.At.UnixNano()])
		}
	}
	got := must(b.Schedule(ctx, sc.ID))(t)
	sameTime(t, "fired_at", got.FiredAt, f6)
	sameTime(t, "next_run_at", got.NextRunAt, f6.Add(time.Minute))

	// The row, not FiredAt, decides: a firing another process has a row
	// for is refused though it is later than FiredAt.
	f7 := base.Add(7 * time.Minute)
	if _, err := b.wdb.Exec(b.dialect.rebind(`INSERT INTO schedule_firings (schedule_id, fire_at, claimed_by, claimed_at)
		VALUES (?, ?, 'elsewhere', ?)`), sc.ID, f7.UnixNano(), time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.ClaimFiring(ctx, sc.ID, f7, f7.Add(time.Minute)); ok || err != nil {
		t.Fatalf("a firing with a row was claimed again: %v %v", ok, err)
	}
	sameTime(t, "fired_at after a refused claim", must(a.Schedule(ctx, sc.ID))(t).FiredAt, f6)

	// Prune deletes the rows before the cutoff, and only those.
	p := must(a.Prune(ctx, base.Add(3*time.Minute)))(t)
	if p.Firings != 3 {
		t.Errorf("pruned %d firing rows, want 3 (those before the cutoff)", p.Firings)
	}
	if rows := must(a.Firings(ctx, sc.ID))(t); len(rows) != 5 || !rows[0].At.Equal(base.Add(3*time.Minute)) {
		t.Errorf("after the prune: %+v, want the 5 from the cutoff on", rows)
	}
	// A pruned firing is still not claimed again (it is behind FiredAt).
	if ok, err := b.ClaimFiring(ctx, sc.ID, base, base.Add(time.Minute)); ok || err != nil {
		t.Errorf("a pruned firing was claimed again: %v %v", ok, err)
	}
	must(0, a.RemoveSchedule(ctx, sc.ID))(t)
	if n := count(t, a.rdb, "schedule_firings"); n != 0 {
		t.Errorf("%d firing rows left after the schedule was removed", n)
	}
}
