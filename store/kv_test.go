package store

import (
	"context"
	"errors"
	"testing"
)

func testSyncToken(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	if v, err := s.SyncToken(ctx, "matrix.next_batch"); v != "" || err != nil {
		t.Errorf("missing key = %q, %v; want \"\", nil", v, err)
	}
	for _, v := range []string{"s72594_4483_1934", "s72600_4483_1935", ""} {
		if err := s.SetSyncToken(ctx, "matrix.next_batch", v); err != nil {
			t.Fatal(err)
		}
		if got, err := s.SyncToken(ctx, "matrix.next_batch"); got != v || err != nil {
			t.Errorf("after set %q: got %q, %v", v, got, err)
		}
	}
	if err := s.SetSyncToken(ctx, "other", "x"); err != nil {
		t.Fatal(err)
	}
	if got := must(s.SyncToken(ctx, "matrix.next_batch"))(t); got != "" {
		t.Errorf("keys interfere: %q", got)
	}
	if err := s.SetSyncToken(ctx, "", "x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty key = %v, want ErrInvalid", err)
	}
}

func TestSyncToken(t *testing.T) { t.Parallel(); eachDriver(t, testSyncToken) }

func testSyncTokens(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	s := drv.openTemp(t)
	if got, err := s.SyncTokens(ctx, "watchdog.hardware."); err != nil || len(got) != 0 {
		t.Errorf("nothing stored: %v, %v; want none", got, err)
	}
	want := map[string]string{"watchdog.hardware.n1/GPU-a": `{"ecc":1}`, "watchdog.hardware.n2/GPU-ä": `{"xid_at":5}`}
	for k, v := range want {
		must(0, s.SetSyncToken(ctx, k, v))(t)
	}
	// Around the prefix: a shorter key, another case, a key the prefix
	// would match as a LIKE pattern ('_' and '%' are not wildcards here).
	for _, k := range []string{"watchdog.hardware", "Watchdog.hardware.x", "watchdogXhardware.y", "matrix.next_batch"} {
		must(0, s.SetSyncToken(ctx, k, "other"))(t)
	}
	got := must(s.SyncTokens(ctx, "watchdog.hardware."))(t)
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := s.SyncTokens(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty prefix = %v, want ErrInvalid", err)
	}
}

func TestSyncTokens(t *testing.T) { t.Parallel(); eachDriver(t, testSyncTokens) }
