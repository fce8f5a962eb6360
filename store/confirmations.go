package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Confirmation is a command waiting for its confirmation: the request that
// asked (or, when Proposed, the room the bot proposed it to), the command
// text (parsed again when it is confirmed), until when it may be confirmed
// and the platform message that shows its preview.
type Confirmation struct {
	Token     string
	Platform  string
	User      string
	UserName  string
	Room      string
	Via       string
	ReplyTo   string
	Command   string
	Proposed  bool
	CreatedAt time.Time
	// Expires is until when it may be confirmed, unless Incident is set.
	Expires   time.Time
	MessageID string // the preview's platform message id; "" until set
	// Incident, when not 0, is the watchdog incident whose alert offers the
	// command (Proposed): the offer holds while that incident is open,
	// whatever Expires says, and ends when it closes.
	Incident int64
}

// ConfirmationCapError says AddConfirmation refused a confirmation because
// too many wait already.
type ConfirmationCapError struct {
	Mine, All int // the requester's unexpired confirmations, and everyone's
}

func (e *ConfirmationCapError) Error() string {
	return fmt.Sprintf("too many confirmations are waiting (%d of yours, %d in all)", e.Mine, e.All)
}

// ErrTokenTaken says a confirmation with that token exists already.
var ErrTokenTaken = errors.New("confirmation token already in use")

const confirmationColumns = `token, platform, user_id, user_name, room, via, reply_to, command, proposed, created_at, expires_at, message_id, incident_id`

// confirmationLive is the SQL condition of a confirmation that may still be
// settled at the time bound to its one parameter: unexpired, or offered by
// an incident that is still open.
const confirmationLive = `((incident_id = 0 AND expires_at >= ?) OR incident_id IN (SELECT id FROM incidents WHERE closed_at IS NULL))`

// AddConfirmation records c unless maxAll confirmations unexpired at at wait
// already, or (for a confirmation that is not Proposed) maxMine of c's
// user's on c's platform: then the error is a *ConfirmationCapError and
// nothing is written. Expired confirmations (and offers of incidents that
// closed) are removed on the way. A token
// in use gives ErrTokenTaken. The count and the insert are one transaction,
// so processes sharing the store share the caps.
func (s *Store) AddConfirmation(ctx context.Context, c Confirmation, at time.Time, maxAll, maxMine int) error {
	if c.Token == "" || c.Platform == "" || strings.TrimSpace(c.Command) == "" || c.Expires.IsZero() {
		return fmt.Errorf("add confirmation: %w: token, platform, command and expiry are required", ErrInvalid)
	}
	c.CreatedAt = orNow(c.CreatedAt)
	err := s.write1(ctx, func(tx *wtx) error {
		t := at.UTC().UnixNano()
		if _, err := tx.ExecContext(context.Background(), `DELETE FROM confirmations WHERE NOT `+confirmationLive, t); err != nil {
			return err
		}
		var all, mine int
		if err := tx.QueryRowContext(context.Background(), `SELECT COUNT(*),
			COALESCE(SUM(CASE WHEN proposed = 0 AND platform = ? AND user_id = ? THEN 1 ELSE 0 END), 0)
			FROM confirmations`, c.Platform, c.User).Scan(&all, &mine); err != nil {
			return err
		}
		if all >= maxAll || (!c.Proposed && mine >= maxMine) {
			return &ConfirmationCapError{Mine: mine, All: all}
		}
		return insertToken(tx, `INSERT INTO confirmations (`+confirmationColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			c.Token, c.Platform, c.User, c.UserName, c.Room, c.Via, c.ReplyTo, c.Command, c.Proposed,
			c.CreatedAt.UnixNano(), c.Expires.UTC().UnixNano(), c.MessageID, c.Incident)
	})
	if err != nil {
		return fmt.Errorf("add confirmation: %w", err)
	}
	return nil
}

// Confirmation returns the confirmation waiting under token (expired or
// not), or an error wrapping ErrNotFound.
func (s *Store) Confirmation(ctx context.Context, token string) (Confirmation, error) {
	return s.confirmation(ctx, `token = ?`, token)
}

// ConfirmationByMessage returns the confirmation whose preview is the
// platform message id, or an error wrapping ErrNotFound.
func (s *Store) ConfirmationByMessage(ctx context.Context, platform, id string) (Confirmation, error) {
	if id == "" {
		return Confirmation{}, fmt.Errorf("confirmation of a message: %w", ErrNotFound)
	}
	return s.confirmation(ctx, `platform = ? AND message_id = ?`, platform, id)
}

// PendingConfirmations returns the confirmations asked on platform in room
// that may still be settled at at (unexpired, or offered by an incident
// still open), oldest first.
func (s *Store) PendingConfirmations(ctx context.Context, platform, room string, at time.Time) ([]Confirmation, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations
		WHERE platform = ? AND room = ? AND `+confirmationLive+` ORDER BY created_at, token`, platform, room, at.UTC().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("read pending confirmations: %w", err)
	}
	defer rows.Close()
	var out []Confirmation
	for rows.Next() {
		c, err := scanConfirmation(rows)
		if err != nil {
			return nil, fmt.Errorf("read pending confirmations: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pending confirmations: %w", err)
	}
	return out, nil
}

func (s *Store) confirmation(ctx context.Context, where string, args ...any) (Confirmation, error) {
	c, err := scanConfirmation(s.rdb.QueryRowContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Confirmation{}, fmt.Errorf("confirmation: %w", ErrNotFound)
	}
	if err != nil {
		return Confirmation{}, fmt.Errorf("read confirmation: %w", err)
	}
	return c, nil
}

func scanConfirmation(sc scanner) (Confirmation, error) {
	var c Confirmation
	var created, expires int64
	err := sc.Scan(&c.Token, &c.Platform, &c.User, &c.UserName, &c.Room, &c.Via, &c.ReplyTo, &c.Command, &c.Proposed,
		&created, &expires, &c.MessageID, &c.Incident)
	c.CreatedAt, c.Expires = time.Unix(0, created).UTC(), time.Unix(0, expires).UTC()
	return c, err
}

// TakeConfirmation removes the confirmation under token and reports whether
// this call removed it: of two processes settling one confirmation, one
// gets true.
func (s *Store) TakeConfirmation(ctx context.Context, token string) (bool, error) {
	taken, err := s.takeToken(ctx, "confirmations", token)
	if err != nil {
		return false, fmt.Errorf("take confirmation: %w", err)
	}
	return taken, nil
}

// SetConfirmationMessage records the platform message id that shows the
// preview of the confirmation under token. A missing token gives ErrNotFound.
func (s *Store) SetConfirmationMessage(ctx context.Context, token, messageID string) error {
	if err := s.setTokenMessage(ctx, "confirmations", token, messageID); err != nil {
		return fmt.Errorf("set confirmation message: %w", err)
	}
	return nil
}

// takeToken deletes the row of table (a table of this package's, keyed by
// token: confirmations, approvals) under token and reports whether this
// call deleted it.
func (s *Store) takeToken(ctx context.Context, table, token string) (bool, error) {
	var taken bool
	err := s.write1(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(context.Background(), `DELETE FROM `+table+` WHERE token = ?`, token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		taken = n == 1
		return err
	})
	return taken, err
}

// setTokenMessage sets message_id of table's row under token; ErrNotFound
// when there is none.
func (s *Store) setTokenMessage(ctx context.Context, table, token, messageID string) error {
	return s.write1(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(context.Background(), `UPDATE `+table+` SET message_id = ? WHERE token = ?`, messageID, token)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// insertToken runs stmt, an INSERT ... ON CONFLICT DO NOTHING of a row
// keyed by a token (a confirmation, an approval); ErrTokenTaken when a row
// already holds that token.
func insertToken(tx *wtx, stmt string, args ...any) error {
	res, err := tx.ExecContext(context.Background(), stmt, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return ErrTokenTaken
	}
	return nil
}
