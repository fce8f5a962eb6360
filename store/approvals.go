package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Approval is a command waiting for a second person's approval
// (auth.two_person): who asked for it, where its job will report, the
// command text (parsed again when it is approved), who confirmed it, until
// when it may be approved, and the platform message that shows the request.
type Approval struct {
	Token    string
	Platform string
	User     string
	UserName string
	Room     string
	Via      string
	ReplyTo  string
	Command  string
	// ConfirmedBy is the "platform:user" who confirmed the command, when
	// it asked for a confirmation ("" when it asked none).
	ConfirmedBy string
	CreatedAt   time.Time
	Expires     time.Time
	MessageID   string // the request's platform message id; "" until set
}

const approvalColumns = `token, platform, user_id, user_name, room, via, reply_to, command, confirmed_by, created_at, expires_at, message_id`

// AddApproval records a unless maxAll approvals unexpired at at wait
// already, or maxMine of a's user's on a's platform: then the error is a
// *ConfirmationCapError and nothing is written. Expired approvals are
// removed on the way. A token in use gives ErrTokenTaken. The count and the
// insert are one transaction, so processes sharing the store share the caps.
func (s *Store) AddApproval(ctx context.Context, a Approval, at time.Time, maxAll, maxMine int) error {
	if a.Token == "" || a.Platform == "" || strings.TrimSpace(a.Command) == "" || a.Expires.IsZero() {
		return fmt.Errorf("add approval: %w: token, platform, command and expiry are required", ErrInvalid)
	}
	a.CreatedAt = orNow(a.CreatedAt)
	err := s.write(ctx, func(tx *wtx) error {
		if _, err := tx.ExecContext(context.Background(), `DELETE FROM approvals WHERE expires_at < ?`, at.UTC().UnixNano()); err != nil {
			return err
		}
		var all, mine int
		if err := tx.QueryRowContext(context.Background(), `SELECT COUNT(*),
			COALESCE(SUM(CASE WHEN platform = ? AND user_id = ? THEN 1 ELSE 0 END), 0) FROM approvals`,
			a.Platform, a.User).Scan(&all, &mine); err != nil {
			return err
		}
		if all >= maxAll || mine >= maxMine {
			return &ConfirmationCapError{Mine: mine, All: all}
		}
		return insertToken(tx, `INSERT INTO approvals (`+approvalColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			a.Token, a.Platform, a.User, a.UserName, a.Room, a.Via, a.ReplyTo, a.Command, a.ConfirmedBy,
			a.CreatedAt.UnixNano(), a.Expires.UTC().UnixNano(), a.MessageID)
	})
	if err != nil {
		return fmt.Errorf("add approval: %w", err)
	}
	return nil
}

// Approval returns the approval waiting under token (expired or not), or
// an error wrapping ErrNotFound.
func (s *Store) Approval(ctx context.Context, token string) (Approval, error) {
	return s.approval(ctx, `token = ?`, token)
}

// ApprovalByMessage returns the approval whose request is the platform
// message id, or an error wrapping ErrNotFound.
func (s *Store) ApprovalByMessage(ctx context.Context, platform, id string) (Approval, error) {
	if id == "" {
		return Approval{}, fmt.Errorf("approval of a message: %w", ErrNotFound)
	}
	return s.approval(ctx, `platform = ? AND message_id = ?`, platform, id)
}

func (s *Store) approval(ctx context.Context, where string, args ...any) (Approval, error) {
	var a Approval
	var created, expires int64
	err := s.rdb.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE `+where, args...).Scan(
		&a.Token, &a.Platform, &a.User, &a.UserName, &a.Room, &a.Via, &a.ReplyTo, &a.Command, &a.ConfirmedBy,
		&created, &expires, &a.MessageID)
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, fmt.Errorf("approval: %w", ErrNotFound)
	}
	if err != nil {
		return Approval{}, fmt.Errorf("read approval: %w", err)
	}
	a.CreatedAt, a.Expires = time.Unix(0, created).UTC(), time.Unix(0, expires).UTC()
	return a, nil
}

// TakeApproval removes the approval under token and reports whether this
// call removed it: of two processes (or two people) settling one approval,
// one gets true.
func (s *Store) TakeApproval(ctx context.Context, token string) (bool, error) {
	taken, err := s.takeToken(ctx, "approvals", token)
	if err != nil {
		return false, fmt.Errorf("take approval: %w", err)
	}
	return taken, nil
}

// SetApprovalMessage records the platform message id that shows the
// request of the approval under token. A missing token gives ErrNotFound.
func (s *Store) SetApprovalMessage(ctx context.Context, token, messageID string) error {
	if err := s.setTokenMessage(ctx, "approvals", token, messageID); err != nil {
		return fmt.Errorf("set approval message: %w", err)
	}
	return nil
}

// PendingApprovals returns the approvals that may still be approved at at,
// oldest first.
func (s *Store) PendingApprovals(ctx context.Context, at time.Time) ([]Approval, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT token FROM approvals WHERE expires_at >= ? ORDER BY created_at, token`, at.UTC().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("read pending approvals: %w", err)
	}
	var tokens []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read pending approvals: %w", err)
		}
		tokens = append(tokens, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pending approvals: %w", err)
	}
	out := make([]Approval, 0, len(tokens))
	for _, t := range tokens {
		a, err := s.Approval(ctx, t)
		if errors.Is(err, ErrNotFound) {
			continue // taken meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
