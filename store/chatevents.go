package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Claim is what ClaimDelivery found.
type Claim struct {
	// First is true when this call claimed the delivery: act on it. False
	// means it was claimed before (by this process or another on the store)
	// and must not be acted on again.
	First bool
	// Replays counts the times the delivery came again after its claim,
	// this one included (0 when First).
	Replays int64
}

// ClaimDelivery records that this process takes on the chat delivery key of
// platform (a Slack delivery's key, a Matrix event id) and reports whether it
// is the first to; a later claim of the same key counts a replay. A nil
// error with First means the claim is committed. Claims older than keep are
// removed now and then (at most once a minute; keep <= 0 keeps them all):
// keep must outlast the platform's replay window. The claim is one statement
// batched with the other writes of the moment: the door's hot path.
func (s *Store) ClaimDelivery(ctx context.Context, platform, key string, keep time.Duration) (Claim, error) {
	if strings.TrimSpace(platform) == "" || strings.TrimSpace(key) == "" {
		return Claim{}, fmt.Errorf("claim chat delivery: %w: empty platform or key", ErrInvalid)
	}
	t := now()
	if last := s.claimsPruned.Load(); keep > 0 && t.UnixNano()-last > int64(time.Minute) && s.claimsPruned.CompareAndSwap(last, t.UnixNano()) {
		if err := s.write1(ctx, func(tx *wtx) error {
			_, err := tx.ExecContext(context.Background(), `DELETE FROM chat_events WHERE seen_at < ?`, t.Add(-keep).UnixNano())
			return err
		}); err != nil {
			return Claim{}, fmt.Errorf("prune old chat claims: %w", err)
		}
	}
	var c Claim
	err := s.writeAuto(ctx, func(tx *wtx) error {
		err := tx.QueryRowContext(context.Background(), `INSERT INTO chat_events (platform, event_id, seen_at) VALUES (?, ?, ?)
			ON CONFLICT (platform, event_id) DO UPDATE SET replays = chat_events.replays + 1
			RETURNING replays`, platform, key, t.UnixNano()).Scan(&c.Replays)
		c.First = c.Replays == 0
		return err
	})
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s delivery %s: %w", platform, key, err)
	}
	return c, nil
}

// ClaimEvent is ClaimDelivery reporting only whether the claim is the first.
func (s *Store) ClaimEvent(ctx context.Context, platform, eventID string, keep time.Duration) (bool, error) {
	c, err := s.ClaimDelivery(ctx, platform, eventID, keep)
	return c.First, err
}
