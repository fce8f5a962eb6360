package config

import (
	"net/url"
	"strings"
)

// Store says which database opsbot keeps its state in and how long it keeps
// history. Driver "sqlite" (the default) keeps it in the file Path; driver
// "postgres" in the PostgreSQL database URL names, which several opsbot
// processes on several machines share. Path is for sqlite only and URL for
// postgres only: Validate refuses the other by name.
type Store struct {
	// Driver is "sqlite" (default) or "postgres".
	Driver string `yaml:"driver,omitempty"`
	// Path is the SQLite file (driver sqlite).
	Path string `yaml:"path,omitempty"`
	// URL is the PostgreSQL connection string (driver postgres), a
	// postgres:// URL or key=value pairs, written literally, as ${ENV} or as
	// file:/path. It may hold a password: a secret, never printed.
	URL Secret `yaml:"url,omitempty"`
	// MaxConns bounds the connections to PostgreSQL (driver postgres).
	// Default DefaultStoreMaxConns.
	MaxConns int `yaml:"max_conns,omitempty"`
	// Retention is how long job events and audit entries are kept; older
	// ones are pruned once a day by `opsbot serve`. Default 90d.
	Retention Duration `yaml:"retention,omitempty"`
}

// The store drivers (store.driver).
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// validateStore checks the store section: the driver, and the one key that
// names the database for it (store.path for sqlite, store.url for postgres),
// refusing the other by name. store.url is a secret: no message shows it.
func (c *Config) validateStore(bad func(format string, a ...any)) {
	st := c.Store
	switch st.Driver {
	case "", StoreSQLite:
		if st.Path == "" {
			bad("store.path is required (the SQLite file, e.g. opsbot.db)")
		}
		if st.URL != "" {
			bad("store.url is for store.driver postgres; with driver sqlite the store is the file store.path (remove store.url, or set store.driver: postgres)")
		}
		if st.MaxConns != 0 {
			bad("store.max_conns is for store.driver postgres; a sqlite store has one writer (remove store.max_conns)")
		}
	case StorePostgres:
		if st.URL == "" {
			bad("store.url is required with store.driver postgres (postgres://USER@HOST:5432/DB?sslmode=verify-full, ${ENV} or file:/path)")
		} else if resolved(st.URL) && !postgresURL(st.URL.Value()) {
			bad("store.url is not a PostgreSQL connection string: expected postgres://USER@HOST:PORT/DB or key=value pairs such as host=HOST dbname=DB (the value is a secret and is not shown)")
		}
		if st.Path != "" {
			bad("store.path is for store.driver sqlite; with driver postgres the store is store.url (remove store.path)")
		}
		if st.MaxConns < 1 || st.MaxConns > 1000 {
			bad("store.max_conns: %d is not in 1..1000 (the most connections opsbot opens to PostgreSQL; default %d)", st.MaxConns, DefaultStoreMaxConns)
		}
	default:
		bad("store.driver: %q is not one of sqlite, postgres", st.Driver)
	}
}

// postgresURL reports whether s has the shape of a PostgreSQL connection
// string: a postgres:// or postgresql:// URL with a host or a socket
// directory, or libpq's key=value pairs.
func postgresURL(s string) bool {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		return err == nil && (u.Host != "" || u.Query().Get("host") != "")
	}
	return strings.Contains(s, "=") && !strings.Contains(s, "://")
}
