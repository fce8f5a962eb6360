package store

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Config says which database to open (config.Store's keys).
type Config struct {
	Driver   string // "sqlite" (default) or "postgres"
	Path     string // the SQLite file (driver sqlite)
	URL      string // the PostgreSQL connection string (driver postgres); a secret, never in an error
	MaxConns int    // the most connections to PostgreSQL; DefaultMaxConns when 0
}

// DefaultMaxConns is Config.MaxConns when 0.
const DefaultMaxConns = 8

// OpenConfig opens the store c names: Open for sqlite, OpenPostgres for
// postgres. An unknown driver gives ErrInvalid.
func OpenConfig(ctx context.Context, c Config) (*Store, error) {
	switch c.Driver {
	case "", "sqlite":
		return Open(ctx, c.Path)
	case "postgres":
		return OpenPostgres(ctx, c.URL, c.MaxConns)
	}
	return nil, fmt.Errorf("open store: %w: driver %q is not sqlite or postgres", ErrInvalid, c.Driver)
}

// OpenPostgres opens the PostgreSQL database that url names (a postgres://
// URL or key=value pairs) with at most maxConns connections
// (DefaultMaxConns when 0), and creates or migrates its schema, under
// schema_migrations' table lock, to the newest version this binary knows;
// a schema newer than that is refused with a *SchemaVersionError and left
// untouched. Several opsbot processes, on several machines, may share the
// database.
//
// The connections keep no session state and no prepared statements (pgx's
// simple protocol), so PgBouncer in transaction mode may sit between opsbot
// and the database. Every statement and every write transaction is bounded
// by StatementTimeout. Errors never show url (it may hold a password).
func OpenPostgres(ctx context.Context, url string, maxConns int) (*Store, error) {
	if url == "" {
		return nil, fmt.Errorf("open store: %w: the PostgreSQL URL is empty", ErrInvalid)
	}
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open store: %w: store.url is not a valid PostgreSQL connection string", ErrInvalid)
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cc.StatementCacheCapacity = 0
	cc.DescriptionCacheCapacity = 0
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > StatementTimeout {
		cc.ConnectTimeout = StatementTimeout
	}
	name := fmt.Sprintf("postgres %s:%d/%s", cc.Host, cc.Port, cc.Database)
	pool := stdlib.OpenDB(*cc)
	pool.SetMaxOpenConns(maxConns)
	pool.SetMaxIdleConns(maxConns)
	pool.SetConnMaxIdleTime(5 * time.Minute)
	pool.SetConnMaxLifetime(time.Hour)
	pctx, cancel := context.WithTimeout(ctx, 5*StatementTimeout)
	err = pool.PingContext(pctx)
	cancel()
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store %s: %w%s", name, err, connectHint(err))
	}
	// Migrations may take longer than one statement; they are bounded by
	// ctx and a minute.
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = migrate(mctx, pool, migrationFS, postgresSQL)
	cancel()
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store %s: %w", name, err)
	}
	m := &metrics{}
	s := &Store{
		pgConfig: cc,
		name:     name,
		dialect:  postgresSQL,
		m:        m,
		wdb:      pool,
		rdb:      &db{DB: pool, d: postgresSQL, m: m},
		ckpt:     make(chan struct{}, 1),
		ops:      make(chan *writeOp),
		acks:     make(chan *writeOp),
		closing:  make(chan struct{}),
	}
	s.health.settled = refusalSettles
	writers := pgWriters(maxConns)
	s.writerWG.Add(writers + pgAckers)
	for range writers {
		go s.writer()
	}
	for range pgAckers {
		go s.acker()
	}
	return s, nil
}

// Name says which database c names, for people, as Store.Name does: the
// SQLite file, or "postgres HOST:PORT/DB" (never the password).
func (c Config) Name() string {
	if c.Driver != "postgres" {
		return c.Path
	}
	cc, err := pgx.ParseConfig(c.URL)
	if err != nil {
		return "postgres (store.url does not parse)"
	}
	return fmt.Sprintf("postgres %s:%d/%s", cc.Host, cc.Port, cc.Database)
}

// CheckConfig checks the store c names without changing it: CheckFile for
// sqlite; for postgres, that the database answers within StatementTimeout
// and holds no schema newer than this binary (a *SchemaVersionError). An
// empty database is fine: the first start creates the schema.
func CheckConfig(ctx context.Context, c Config) error {
	if c.Driver != "postgres" {
		return CheckFile(ctx, c.Path)
	}
	cc, err := pgx.ParseConfig(c.URL)
	if err != nil {
		return fmt.Errorf("%w: store.url is not a valid PostgreSQL connection string", ErrInvalid)
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	if cc.ConnectTimeout == 0 || cc.ConnectTimeout > StatementTimeout {
		cc.ConnectTimeout = StatementTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, 2*StatementTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("%s: %w%s", c.Name(), err, connectHint(err))
	}
	defer conn.Close(context.Background())
	var v int
	var exists bool
	err = conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists)
	if err == nil && exists {
		err = conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	}
	if err != nil {
		return fmt.Errorf("%s: read schema version: %w", c.Name(), err)
	}
	ms, err := loadMigrations(migrationFS, postgresSQL)
	if err != nil {
		return err
	}
	if v > len(ms) {
		return fmt.Errorf("%s: %w", c.Name(), &SchemaVersionError{Database: v, Binary: len(ms)})
	}
	return nil
}

// ErrUnreachable is wrapped by the error of a write whose transaction the
// database did not complete within StatementTimeout (it did not answer, or
// the connection to it broke): a store that refuses writes (see
// IsRefusingWrites).
var ErrUnreachable = errors.New("the database did not answer within the statement timeout")

// pgRefusal reports whether err says that PostgreSQL cannot take writes at
// all, as opposed to one write's own problem: it cannot be reached or the
// connection broke (pgconn's connect errors, network errors, SQLSTATE
// class 08), it did not answer in time (ErrUnreachable), it is shutting
// down or starting (57P), out of resources (53: disk full, too many
// connections), read-only (25006, a standby), or its system failed (58).
func pgRefusal(err error) bool {
	if errors.Is(err, ErrUnreachable) || errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		for _, class := range []string{"08", "53", "57P", "58"} {
			if strings.HasPrefix(pe.Code, class) {
				return true
			}
		}
		return pe.Code == "25006"
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

// pgWriters is how many writer goroutines a PostgreSQL store runs with a
// pool of maxConns connections: all but three, which stay for the acker
// (see acker) and for reads (at least one writer).
func pgWriters(maxConns int) int { return max(1, maxConns-3) }

// pgAckers is how many ackers a PostgreSQL store runs. One: the calls that
// queue while its statement runs all go into its next one, and a second
// acker would split them into more, smaller statements, which cost more
// in all (each has its own parse, plan and commit) where the CPU is short.
const pgAckers = 1

// connectHint is what to do about a connection error whose cause is known:
// a server without TLS asked for TLS by store.url's sslmode (verify-full,
// require, verify-ca; pgx says "server refused TLS connection").
func connectHint(err error) string {
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return ": the server does not offer TLS, and store.url's sslmode requires it: for a cluster on this machine " +
			"use sslmode=disable on its unix socket or loopback (postgres:///opsbot?host=/var/run/postgresql&sslmode=disable), " +
			"or turn on TLS on the server (ssl = on in postgresql.conf, with a certificate) and keep sslmode=verify-full for one reached over a network"
	}
	return ""
}
