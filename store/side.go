package store

import (
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"
)

// SideDB opens another handle on the store's database for a library that
// keeps tables of its own in it (the Matrix adapter's end-to-end encryption
// keys, through mautrix's dbutil), and names its dialect as dbutil does
// ("sqlite3" or "postgres"). One connection, so that the library's
// transactions never wait on each other (on PostgreSQL, one connection
// beyond store.max_conns).
//
// On SQLite it uses the store's pure-Go driver and pragmas: WAL, the busy
// timeout, foreign keys, immediate write transactions. On PostgreSQL it
// connects as the store does (no prepared statements kept, no session
// state), so a standby on another machine finds the same keys and is the
// same Matrix device.
//
// Those tables belong to the library: the store's migrations, retention and
// queries never touch them. quick_check at open and `opsbot store backup`
// cover them, as they live in the same file (a backup holds the keys too);
// `opsbot store copy` copies them.
// The caller closes the handle, before the Store.
func (s *Store) SideDB() (*sql.DB, string, error) {
	if s.dialect == postgresSQL {
		db := stdlib.OpenDB(*s.pgConfig)
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		return db, "postgres", nil
	}
	db, err := sql.Open("sqlite", dsn(s.path, false))
	if err != nil {
		return nil, "", fmt.Errorf("open store %s: %w", s.path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, "sqlite3", nil
}
