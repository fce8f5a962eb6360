package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
)

// Migrations: one version sequence for both dialects, embedded in the
// binary. Version N is the file NNNN_name.sql, which both SQLite and
// PostgreSQL run, unless a variant for one dialect sits beside it:
// NNNN_name.sqlite.sql or NNNN_name.postgres.sql (that dialect runs the
// variant instead). A version may also be only the two variants, with no
// common file. Every version must exist for both dialects, under one name:
// the database records "NNNN_name" whichever file ran. A migration written
// once for both should stay within what both accept (BIGINT for integers,
// DOUBLE PRECISION for reals, TEXT, ALTER TABLE ... ADD COLUMN, CREATE
// INDEX); anything else (triggers, identity keys, WITHOUT ROWID, JSON
// functions) gets a variant per dialect.
//
//go:embed migrations/*.sql
var embedded embed.FS

// migrationFS holds this binary's migrations at its root.
var migrationFS = mustSub(embedded, "migrations")

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // only if the embed pattern above is broken
	}
	return sub
}

// SchemaVersionError reports a database whose schema was written by a newer
// opsbot than this one. Open refuses it and changes nothing; upgrade the
// binary or point it at another file.
type SchemaVersionError struct {
	Database int // the newest migration recorded in the database
	Binary   int // the newest migration this binary knows
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this binary knows (%d): upgrade opsbot, or use another store path", e.Database, e.Binary)
}

type migration struct {
	version int
	name    string // file name without the .sql suffix, e.g. "0001_init"
	sql     string
}

var migrationName = regexp.MustCompile(`^(([0-9]{4})_[a-z0-9_]+)(\.(sqlite|postgres))?\.sql$`)

// loadMigrations reads the migrations for dialect d from the root of fsys
// (see migrationFS for the scheme). Versions must run 1, 2, 3, ... without
// gaps or duplicates, and each must exist for d.
func loadMigrations(fsys fs.FS, d dialect) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	byName := map[string]*migration{} // the file chosen so far for each NNNN_name
	variant := map[string]bool{}      // whether it is d's own variant
	have := map[string]bool{}         // whether a file for d was found
	var names []string
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			return nil, fmt.Errorf("migration %q: name is not NNNN_name.sql, NNNN_name.sqlite.sql or NNNN_name.postgres.sql", e.Name())
		}
		name, forDialect := m[1], m[4]
		v, _ := strconv.Atoi(m[2])
		if _, ok := byName[name]; !ok {
			byName[name] = &migration{version: v, name: name}
			names = append(names, name)
		}
		if forDialect != "" && forDialect != d.String() {
			continue
		}
		if variant[name] || (forDialect == "" && have[name]) {
			continue
		}
		text, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		byName[name].sql = string(text)
		variant[name] = forDialect != ""
		have[name] = true
	}
	var ms []migration
	for _, name := range names {
		m := byName[name]
		if !have[name] {
			return nil, fmt.Errorf("migration %s has no file for %s: add %s.sql (both dialects) or %s.%s.sql", name, d, name, name, d)
		}
		ms = append(ms, *m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %04d (versions must start at 1 and have no gaps or duplicates)", m.name, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("no migrations")
	}
	return ms, nil
}

// migrate brings db up to the newest migration in fsys, one migration per
// write transaction. The current version is read inside each transaction, so
// processes that open the same file at once apply each migration exactly
// once. A database newer than fsys is refused with *SchemaVersionError.
//
// On PostgreSQL each transaction first takes schema_migrations' table lock
// (LOCK TABLE, released at commit: never a session lock, which would
// outlive or vanish with a pooled backend), so processes that start
// together migrate one after the other.
func migrate(ctx context.Context, db *sql.DB, fsys fs.FS, d dialect) error {
	ms, err := loadMigrations(fsys, d)
	if err != nil {
		return err
	}
	if d == postgresSQL {
		// Two processes creating the table at once may collide on
		// PostgreSQL's catalog; the loser finds it there on its next try.
		for try := 0; ; try++ {
			_, err := db.ExecContext(ctx, createMigrationsTable(d))
			if err == nil {
				break
			}
			if try == 2 || ctx.Err() != nil {
				return fmt.Errorf("migrate: create schema_migrations: %w", err)
			}
		}
	}
	for {
		done, err := migrateStep(ctx, db, ms, d)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the next migration, if any, and reports whether the
// schema is now current.
func migrateStep(ctx context.Context, db *sql.DB, ms []migration, d dialect) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if d == postgresSQL {
		if _, err := tx.ExecContext(ctx, `LOCK TABLE schema_migrations IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return false, fmt.Errorf("migrate: lock schema_migrations: %w", err)
		}
	} else if _, err := tx.ExecContext(ctx, createMigrationsTable(d)); err != nil {
		return false, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT version, name FROM schema_migrations ORDER BY version`)
	if err != nil {
		return false, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	cur := 0
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			rows.Close()
			return false, fmt.Errorf("migrate: read schema_migrations: %w", err)
		}
		cur = v
		if v >= 1 && v <= len(ms) && ms[v-1].name != name {
			rows.Close()
			return false, fmt.Errorf("migrate: the database's migration %d is %q but this binary's is %q: the file was written by a different build", v, name, ms[v-1].name)
		}
	}
	if err := rows.Close(); err != nil {
		return false, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	if cur > len(ms) {
		return false, &SchemaVersionError{Database: cur, Binary: len(ms)}
	}
	if cur == len(ms) {
		return true, tx.Commit()
	}
	m := ms[cur]
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return false, fmt.Errorf("migrate: apply %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
		m.version, m.name, now().UnixNano()); err != nil {
		return false, fmt.Errorf("migrate: record %s: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrate: commit %s: %w", m.name, err)
	}
	return m.version == len(ms), nil
}

func createMigrationsTable(d dialect) string {
	return `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    ` + d.pick("INTEGER", "BIGINT") + ` PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at ` + d.pick("INTEGER", "BIGINT") + ` NOT NULL
	)`
}

// SchemaVersion returns the newest migration applied to the database.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := s.rdb.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
