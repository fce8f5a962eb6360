package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// ClaimEvent records that this process takes on the chat event eventID of
// platform, and reports whether it is the first to: false means the event
// was claimed before (by this process or another on the same file) and must
// not be acted on again. A nil error with true means the claim is committed.
// Claims older than keep are removed on the way (keep <= 0 keeps them all).
func (s *Store) ClaimEvent(ctx context.Context, platform, eventID string, keep time.Duration) (bool, error) {
	if strings.TrimSpace(platform) == "" || strings.TrimSpace(eventID) == "" {
		return false, fmt.Errorf("claim chat event: %w: empty platform or event id", ErrInvalid)
	}
	var first bool
	err := s.write(ctx, func(tx *wtx) error {
		t := now()
		if keep > 0 {
			if _, err := tx.ExecContext(context.Background(), `DELETE FROM chat_events WHERE seen_at < ?`, t.Add(-keep).UnixNano()); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(context.Background(), `INSERT INTO chat_events (platform, event_id, seen_at) VALUES (?, ?, ?)
			ON CONFLICT DO NOTHING`, platform, eventID, t.UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		first = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("claim %s event %s: %w", platform, eventID, err)
	}
	return first, nil
}
