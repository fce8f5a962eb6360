package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestClaimFiringOnceAcrossStores: two Stores on one file claim the same
// firing at once; exactly one wins, and an older firing is never claimed
// after a newer one.
func testClaimFiringOnceAcrossStores(t *testing.T, drv driver) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	a, b := drv.openAt(t, path), drv.openAt(t, path)
	ctx := context.Background()
	sc, err := a.AddSchedule(ctx, Schedule{Spec: "0 3 * * *", Command: "bench qwen"})
	if err != nil {
		t.Fatal(err)
	}
	firing := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	for round := 0; round < 20; round++ {
		f := firing.Add(time.Duration(round) * 24 * time.Hour)
		var wg sync.WaitGroup
		won := make([]bool, 2)
		for i, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := s.ClaimFiring(ctx, sc.ID, f, f.Add(24*time.Hour))
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
	}
	if ok, err := a.ClaimFiring(ctx, sc.ID, firing, firing); err != nil || ok {
		t.Fatalf("an old firing was claimed again: %v %v", ok, err)
	}
	got, _ := b.Schedule(ctx, sc.ID)
	sameTime(t, "fired_at", got.FiredAt, firing.Add(19*24*time.Hour))
	if _, err := a.ClaimFiring(ctx, 999, firing, firing); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing schedule: %v", err)
	}
}

func TestClaimFiringOnceAcrossStores(t *testing.T) {
	t.Parallel()
	eachDriver(t, testClaimFiringOnceAcrossStores)
}

// TestOpenIncidentOncePerService: one open incident per service, however
// many open it at once; once closed, a new one may open; ack keeps the first.
func testOpenIncidentOncePerService(t *testing.T, drv driver) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	a, b := drv.openAt(t, path), drv.openAt(t, path)
	ctx := context.Background()
	var wg sync.WaitGroup
	opened := make([]bool, 2)
	for i, s := range []*Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := s.OpenIncident(ctx, Incident{Service: "qwen", Kind: "restart_loop", Summary: "loop"})
			if err != nil {
				t.Error(err)
			}
			opened[i] = ok
		}()
	}
	wg.Wait()
	if opened[0] == opened[1] {
		t.Fatalf("opened %v, want exactly one", opened)
	}
	in, err := a.OpenIncidentOf(ctx, "qwen")
	if err != nil {
		t.Fatal(err)
	}
	in.Alerts = []AlertRef{{Platform: "slack", Room: "C0OPS", ID: "1.2"}}
	if err := b.UpdateIncident(ctx, in, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.AckIncident(ctx, in.ID, "slack:U1", time.Now()); got.AckedBy != "slack:U1" || len(got.Alerts) != 1 {
		t.Fatalf("ack: %+v", got)
	}
	if got, _ := b.AckIncident(ctx, in.ID, "slack:U2", time.Now()); got.AckedBy != "slack:U1" {
		t.Fatalf("a second ack replaced the first: %+v", got)
	}
	if err := a.CloseIncident(ctx, in.ID, "serves again", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := b.CloseIncident(ctx, in.ID, "again", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("closing twice: %v", err)
	}
	if _, ok, err := b.OpenIncident(ctx, Incident{Service: "qwen", Kind: "down"}); err != nil || !ok {
		t.Fatalf("a new incident after the close: %v %v", ok, err)
	}
}

func TestOpenIncidentOncePerService(t *testing.T) {
	t.Parallel()
	eachDriver(t, testOpenIncidentOncePerService)
}

// TestSyncConfigSchedules: a kept config entry keeps its id and firings, a
// removed one goes, chat schedules stay.
func testSyncConfigSchedules(t *testing.T, drv driver) {
	t.Parallel()
	s := drv.openTemp(t)
	ctx := context.Background()
	chat, _ := s.AddSchedule(ctx, Schedule{Spec: "@daily", Command: "bench qwen", Platform: "slack", Room: "C1", CreatedBy: "U1"})
	one := Schedule{Spec: "0 3 * * *", Command: "sweep qwen steps 1..3", Creator: "slack:U1", Targets: "slack:C0OPS", ConfigKey: "k1"}
	two := Schedule{Spec: "0 4 * * *", Command: "bench qwen", Creator: "slack:U1", Targets: "slack:C0OPS", ConfigKey: "k2", Missed: "run"}
	got, err := s.SyncConfigSchedules(ctx, []Schedule{one, two})
	if err != nil || len(got) != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	f := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	if ok, err := s.ClaimFiring(ctx, got[0].ID, f, f.Add(24*time.Hour)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	again, err := s.SyncConfigSchedules(ctx, []Schedule{one})
	if err != nil || len(again) != 1 || again[0].ID != got[0].ID || !again[0].FiredAt.Equal(f) || again[0].Missed != "skip" {
		t.Fatalf("%+v %v", again, err)
	}
	all, _ := s.Schedules(ctx)
	if len(all) != 2 || all[0].ID != chat.ID || all[0].Owner() != "slack:U1" {
		t.Fatalf("%+v", all)
	}
}

func TestSyncConfigSchedules(t *testing.T) { t.Parallel(); eachDriver(t, testSyncConfigSchedules) }
