package store

import (
	"database/sql"
	"fmt"
)

// SideDB opens another handle on the store's file for a library that keeps
// tables of its own in it (the Matrix adapter's end-to-end encryption keys,
// through mautrix's dbutil). It uses the store's pure-Go driver and pragmas:
// WAL, the busy timeout, foreign keys, immediate write transactions; one
// connection, so that the library's transactions never wait on each other.
//
// Those tables belong to the library: the store's migrations, retention and
// queries never touch them. quick_check at open and `opsbot store backup`
// cover them, as they live in the same file (a backup holds the keys too).
// The caller closes the handle, before the Store.
func (s *Store) SideDB() (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(s.path, false))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", s.path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, nil
}
