package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestClaimDeliveryCountsReplays: the first claim of a key is First; each
// later one, from this handle or another on the file, counts a replay.
func TestClaimDeliveryCountsReplays(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	a, b := openAt(t, path), openAt(t, path)
	ctx := context.Background()
	for i, s := range []*Store{a, b, a} {
		c, err := s.ClaimDelivery(ctx, "slack", "http:1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if c.First != (i == 0) || c.Replays != int64(i) {
			t.Fatalf("claim %d: %+v", i+1, c)
		}
	}
	if c, err := b.ClaimDelivery(ctx, "matrix", "http:1", time.Hour); err != nil || !c.First {
		t.Fatalf("the same key on another platform: %+v %v", c, err)
	}
	if _, err := a.ClaimDelivery(ctx, "slack", " ", time.Hour); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
}

// TestConfirmationsCappedAndTakenOnce: the caps count unexpired
// confirmations only; a confirmation is found by token or by its message,
// and taken once.
func TestConfirmationsCappedAndTakenOnce(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	now := time.Now()
	add := func(tok, user string, proposed bool, expires time.Time) error {
		return s.AddConfirmation(ctx, Confirmation{Token: tok, Platform: "slack", User: user, Room: "C1", Command: "svc stop qwen",
			Proposed: proposed, Expires: expires}, now, 3, 2)
	}
	if err := add("old", "olga", false, now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"t1", "t2"} {
		if err := add(tok, "olga", false, now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var capped *ConfirmationCapError
	if err := add("t3", "olga", false, now.Add(time.Minute)); !errors.As(err, &capped) || capped.Mine != 2 {
		t.Fatalf("olga's third: %v; want her cap", err)
	}
	if err := add("p1", "opsbot", true, now.Add(time.Minute)); err != nil {
		t.Fatalf("a proposal (not counted as anyone's): %v", err)
	}
	if err := add("t4", "vic", false, now.Add(time.Minute)); !errors.As(err, &capped) || capped.All != 3 {
		t.Fatalf("past the total cap: %v", err)
	}
	if err := add("t1", "vic", true, now.Add(time.Minute)); !errors.Is(err, ErrTokenTaken) && !errors.As(err, &capped) {
		t.Fatalf("a token in use: %v", err)
	}
	if err := s.SetConfirmationMessage(ctx, "t1", "1700000000.000100"); err != nil {
		t.Fatal(err)
	}
	c, err := s.ConfirmationByMessage(ctx, "slack", "1700000000.000100")
	if err != nil || c.Token != "t1" || c.User != "olga" || c.Command != "svc stop qwen" {
		t.Fatalf("by message: %+v %v", c, err)
	}
	if _, err := s.ConfirmationByMessage(ctx, "matrix", "1700000000.000100"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another platform's message: %v", err)
	}
	if ok, err := s.TakeConfirmation(ctx, "t1"); !ok || err != nil {
		t.Fatalf("take: %v %v", ok, err)
	}
	if ok, err := s.TakeConfirmation(ctx, "t1"); ok || err != nil {
		t.Fatalf("take again: %v %v", ok, err)
	}
	if _, err := s.Confirmation(ctx, "old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the expired one was not removed: %v", err)
	}
}

// TestFinalShownClaimedOnce: a final job with a status message is listed
// until its final edit is claimed; a released claim lists it again; a late
// outcome after an interruption lists it again, marked late.
func TestFinalShownClaimedOnce(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	j := mustCreate(t, s, Job{Command: "mtp steps 7 qwen", Platform: "slack", User: "U1", Room: "C1"})
	if err := s.SetJobThread(ctx, j.ID, "1.2"); err != nil {
		t.Fatal(err)
	}
	unshown := func() int {
		js, err := s.UnshownFinals(ctx, []string{"slack"}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(js)
	}
	if n := unshown(); n != 0 {
		t.Fatalf("a queued job listed: %d", n)
	}
	if ok, _ := s.ClaimFinalShown(ctx, j.ID); ok {
		t.Fatal("claimed the final edit of a queued job")
	}
	if err := s.FinishJob(ctx, j.ID, Interrupted, InterruptedMessage, nil); err != nil {
		t.Fatal(err)
	}
	if n := unshown(); n != 1 {
		t.Fatalf("the interrupted job listed %d times", n)
	}
	if js, _ := s.UnshownFinals(ctx, []string{"matrix"}, 10); len(js) != 0 {
		t.Fatal("listed for another platform")
	}
	if ok, err := s.ClaimFinalShown(ctx, j.ID); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if ok, _ := s.ClaimFinalShown(ctx, j.ID); ok || unshown() != 0 {
		t.Fatal("claimed twice")
	}
	if err := s.ReleaseFinalShown(ctx, j.ID); err != nil || unshown() != 1 {
		t.Fatalf("released: %v, listed %d", err, unshown())
	}
	_, _ = s.ClaimFinalShown(ctx, j.ID)
	if err := s.FinishJobLate(ctx, j.ID, Failed, "stopped: lost its lease", nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil || got.Status != Failed || !got.RecordedLate || unshown() != 1 {
		t.Fatalf("after the late outcome: %+v %v, listed %d", got, err, unshown())
	}
	var te *TransitionError
	if err := s.FinishJobLate(ctx, j.ID, Succeeded, "", nil); !errors.As(err, &te) {
		t.Fatalf("a late outcome for a job not interrupted: %v", err)
	}
}

// TestWriteHealthFollowsAFullStore: writes refused by a full database are
// counted and make WriteHealth (and Ping, hence /readyz) name the store;
// a write that succeeds once the refusals settled clears it.
func TestWriteHealthFollowsAFullStore(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	// Refusals settle only when the test says so: a busy machine may take longer than any
	// short settle time between the last refusal and the next write.
	s.health.settled = time.Hour
	ctx := context.Background()
	if err := s.LimitSize(ctx, 0); err != nil {
		t.Fatal(err)
	}
	big := string(make([]byte, 64<<10))
	var err error
	for i := 0; i < 50 && err == nil; i++ {
		err = s.SetSyncToken(ctx, "fill", big+string(rune('a'+i%26)))
	}
	if !IsRefusingWrites(err) {
		t.Fatalf("writes into a full store: %v; want a refusal", err)
	}
	if h := s.WriteHealth(); !errors.Is(h, ErrRefusingWrites) || s.WriteErrors() == 0 {
		t.Fatalf("health %v, %d write errors", h, s.WriteErrors())
	}
	if err := s.Ping(ctx); !errors.Is(err, ErrRefusingWrites) {
		t.Fatalf("ping of a full store: %v", err)
	}
	if err := s.LimitSize(ctx, -1); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSyncToken(ctx, "fill", "small"); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteHealth(); !errors.Is(err, ErrRefusingWrites) {
		t.Fatalf("health after one write right after the refusals: %v; want still refusing", err)
	}
	s.health.mu.Lock()
	s.health.settled = 50 * time.Millisecond
	s.health.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for s.WriteHealth() != nil && time.Now().Before(deadline) {
		if err := s.SetSyncToken(ctx, "fill", "small"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.WriteHealth(); err != nil {
		t.Fatalf("health after writes succeeded again: %v", err)
	}
}
