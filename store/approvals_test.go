package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestApprovalsSharedAndTakenOnce: an approval recorded by one process is
// read, found by its message and taken by another on the same store, once
// of many concurrent takes; the caps hold and expired ones are swept.
func TestApprovalsSharedAndTakenOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, drv driver) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "opsbot.db")
		a, b := drv.openAt(t, path), drv.openAt(t, path)
		ctx := context.Background()
		now := time.Now()
		ap := Approval{Token: "t1", Platform: "slack", User: "UALICE", UserName: "alice", Room: "C1", Command: "svc stop qwen",
			ConfirmedBy: "slack:UALICE", Expires: now.Add(time.Minute)}
		if err := a.AddApproval(ctx, ap, now, 10, 2); err != nil {
			t.Fatal(err)
		}
		if err := a.AddApproval(ctx, ap, now, 10, 2); !errors.Is(err, ErrTokenTaken) {
			t.Fatalf("a second approval under one token: %v", err)
		}
		if err := b.SetApprovalMessage(ctx, "t1", "1700.1"); err != nil {
			t.Fatal(err)
		}
		got, err := b.ApprovalByMessage(ctx, "slack", "1700.1")
		if err != nil || got.Command != "svc stop qwen" || got.ConfirmedBy != "slack:UALICE" || got.UserName != "alice" {
			t.Fatalf("read by the other process: %+v %v", got, err)
		}
		ap.Token = "t2"
		if err := a.AddApproval(ctx, ap, now, 10, 2); err != nil {
			t.Fatal(err)
		}
		ap.Token = "t3"
		var capped *ConfirmationCapError
		if err := a.AddApproval(ctx, ap, now, 10, 2); !errors.As(err, &capped) || capped.Mine != 2 {
			t.Fatalf("the third of one user's approvals: %v", err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 8 {
			wg.Add(1)
			go func(s *Store) {
				defer wg.Done()
				ok, err := s.TakeApproval(ctx, "t1")
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			}([]*Store{a, b}[i%2])
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("%d takes won, want 1", won)
		}
		if _, err := a.Approval(ctx, "t1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a taken approval is still there: %v", err)
		}
		// Later, t2 has expired: the next add sweeps it.
		later := now.Add(2 * time.Minute)
		ap.Token, ap.Expires = "t4", later.Add(time.Minute)
		if err := b.AddApproval(ctx, ap, later, 10, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Approval(ctx, "t2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the expired approval was not swept: %v", err)
		}
	})
}
