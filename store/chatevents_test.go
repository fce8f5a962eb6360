package store

import (
	"context"
	"testing"
)

// TestClaimEvent: the first claim of an event wins, a second (from another
// Store on the same file too) is refused, and another platform's event of the
// same id is its own.
func TestClaimEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/opsbot.db"
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range []struct {
		st           *Store
		platform, id string
		want         bool
	}{
		{a, "matrix", "$e1", true},
		{a, "matrix", "$e1", false},
		{b, "matrix", "$e1", false},
		{b, "matrix", "$e2", true},
		{a, "slack", "$e1", true},
	} {
		got, err := c.st.ClaimEvent(ctx, c.platform, c.id, 0)
		if err != nil || got != c.want {
			t.Errorf("claim %s %s: %v %v, want %v", c.platform, c.id, got, err, c.want)
		}
	}
	if _, err := a.ClaimEvent(ctx, "matrix", "", 0); err == nil {
		t.Error("an empty event id was claimed")
	}
}
