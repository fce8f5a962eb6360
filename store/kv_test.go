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
