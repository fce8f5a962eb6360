package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
	"time"
)

// dialect is the SQL a Store's database speaks. The store's statements are
// written once, in the SQL both accept, with SQLite's ? placeholders;
// rebind turns those into PostgreSQL's $1, $2, ... Where the two differ,
// the statement picks its text with dialect.pick.
type dialect int

const (
	sqliteSQL dialect = iota
	postgresSQL
)

func (d dialect) String() string {
	if d == postgresSQL {
		return "postgres"
	}
	return "sqlite"
}

// pick returns forSQLite or forPostgres, for d.
func (d dialect) pick(forSQLite, forPostgres string) string {
	if d == postgresSQL {
		return forPostgres
	}
	return forSQLite
}

// StatementTimeout bounds every statement (and every write transaction) on
// PostgreSQL, through its context: short enough that a chat command is
// still acked, or refused, within Slack's 3 s when the database does not
// answer.
const StatementTimeout = 2 * time.Second

var rebound sync.Map // query text -> its PostgreSQL form

// rebind returns query with its ? and ?NNN placeholders numbered for
// PostgreSQL ($1, $2, ...); a ? inside a quoted string or identifier is left alone.
// For SQLite it returns query as it is.
func (d dialect) rebind(query string) string {
	if d != postgresSQL || !strings.Contains(query, "?") {
		return query
	}
	if q, ok := rebound.Load(query); ok {
		return q.(string)
	}
	var b strings.Builder
	n := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			// ?NNN is parameter NNN; a bare ? the one after the highest
			// so far, as SQLite numbers them.
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			if j > i+1 {
				k, _ := strconv.Atoi(query[i+1 : j])
				n = max(n, k)
				b.WriteByte('$')
				b.WriteString(query[i+1 : j])
				i = j - 1
				continue
			}
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	q := b.String()
	rebound.Store(query, q)
	return q
}

// args converts the store's arguments for d: PostgreSQL keeps the store's
// flags as integers 0 and 1, as SQLite does, so a bool becomes one.
func (d dialect) args(args []any) []any {
	if d != postgresSQL {
		return args
	}
	for i, a := range args {
		if b, ok := a.(bool); ok {
			v := int64(0)
			if b {
				v = 1
			}
			args[i] = v
		}
	}
	return args
}

// db is the store's read handle: the SQLite read-only pool, or the
// PostgreSQL pool. Its methods are *sql.DB's, with the dialect's
// placeholders, and on PostgreSQL with StatementTimeout.
type db struct {
	*sql.DB
	d dialect
	m *metrics
}

// bound returns ctx bounded by StatementTimeout on PostgreSQL. The bound
// outlives the call (rows are read after it returns): its timer ends it.
func (b *db) bound(ctx context.Context) context.Context {
	if b.d != postgresSQL {
		return ctx
	}
	ctx, cancel := context.WithTimeout(ctx, StatementTimeout)
	time.AfterFunc(StatementTimeout, cancel)
	return ctx
}

func (b *db) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	t0 := time.Now()
	rows, err := b.DB.QueryContext(b.bound(ctx), b.d.rebind(query), b.d.args(args)...)
	b.m.observe(t0, err)
	return rows, err
}

func (b *db) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	t0 := time.Now()
	row := b.DB.QueryRowContext(b.bound(ctx), b.d.rebind(query), b.d.args(args)...)
	b.m.observe(t0, row.Err())
	return row
}

func (b *db) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	t0 := time.Now()
	res, err := b.DB.ExecContext(b.bound(ctx), b.d.rebind(query), b.d.args(args)...)
	b.m.observe(t0, err)
	return res, err
}

func (b *db) QueryRow(query string, args ...any) *sql.Row {
	return b.QueryRowContext(context.Background(), query, args...)
}

func (b *db) Query(query string, args ...any) (*sql.Rows, error) {
	return b.QueryContext(context.Background(), query, args...)
}

func (b *db) Exec(query string, args ...any) (sql.Result, error) {
	return b.ExecContext(context.Background(), query, args...)
}

// rtx is a read transaction on db: *sql.Tx's query methods, with the
// dialect's placeholders. On PostgreSQL the whole transaction is bounded by
// StatementTimeout.
type rtx struct {
	*sql.Tx
	d dialect
}

func (b *db) BeginTx(ctx context.Context, opts *sql.TxOptions) (*rtx, error) {
	tx, err := b.DB.BeginTx(b.bound(ctx), opts)
	if err != nil {
		return nil, err
	}
	return &rtx{Tx: tx, d: b.d}, nil
}

func (t *rtx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.Tx.QueryContext(ctx, t.d.rebind(query), t.d.args(args)...)
}

func (t *rtx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, t.d.rebind(query), t.d.args(args)...)
}
