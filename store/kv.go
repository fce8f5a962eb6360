package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// SyncToken returns the value stored under key (an adapter's sync token,
// scheduler bookkeeping, ...), or "" and a nil error when nothing is stored:
// a first start needs no special case.
func (s *Store) SyncToken(ctx context.Context, key string) (string, error) {
	var v string
	err := s.rdb.QueryRowContext(ctx, `SELECT value FROM kv WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %q: %w", key, err)
	}
	return v, nil
}

// SyncTokens returns every value stored under a key that starts with
// prefix (not empty), by key: one read for what SyncToken would read key by
// key (the watchdog's baseline of every GPU).
func (s *Store) SyncTokens(ctx context.Context, prefix string) (map[string]string, error) {
	if prefix == "" {
		return nil, fmt.Errorf("read values: %w: the prefix is empty", ErrInvalid)
	}
	// substr and length count characters on both drivers, whatever the
	// collation (a range on key would follow PostgreSQL's collation).
	rows, err := s.rdb.QueryContext(ctx, `SELECT key, value FROM kv WHERE substr(key, 1, length(?)) = ?`, prefix, prefix)
	if err != nil {
		return nil, fmt.Errorf("read values under %q: %w", prefix, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("read values under %q: %w", prefix, err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read values under %q: %w", prefix, err)
	}
	return out, nil
}

// SetSyncToken stores value under key, replacing what was there. key must not
// be empty.
func (s *Store) SetSyncToken(ctx context.Context, key, value string) error {
	if strings.TrimSpace(key) == "" {
		return fmt.Errorf("store value: %w: the key is empty", ErrInvalid)
	}
	at := now().UnixNano()
	err := s.write1(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(context.Background(), `INSERT INTO kv (key, value, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, key, value, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("store %q: %w", key, err)
	}
	return nil
}
