package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

// withExtra returns the binary's migrations plus extra files.
func withExtra(t *testing.T, extra map[string]string) fs.FS {
	t.Helper()
	m := fstest.MapFS{}
	entries, err := fs.ReadDir(migrationFS, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(migrationFS, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = &fstest.MapFile{Data: b}
	}
	for name, text := range extra {
		m[name] = &fstest.MapFile{Data: []byte(text)}
	}
	return m
}

func known(t *testing.T) int {
	t.Helper()
	ms, err := loadMigrations(migrationFS, sqliteSQL)
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

func TestMigrationsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	path := s.Path()
	n := known(t)
	if v, err := s.SchemaVersion(ctx); err != nil || v != n {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, n)
	}
	mustCreate(t, s, Job{Command: "keep me"})
	var applied int64
	if err := s.rdb.QueryRow(`SELECT applied_at FROM schema_migrations WHERE version = 1`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for range 3 {
		s2 := openAt(t, path)
		var rows int
		var again int64
		if err := s2.rdb.QueryRow(`SELECT COUNT(*), (SELECT applied_at FROM schema_migrations WHERE version = 1) FROM schema_migrations`).Scan(&rows, &again); err != nil {
			t.Fatal(err)
		}
		if rows != n || again != applied {
			t.Fatalf("reopen re-applied migrations: %d rows (want %d), applied_at %d (want %d)", rows, n, again, applied)
		}
		if jobs := must(s2.ListJobs(ctx, JobFilter{}))(t); len(jobs) != 1 {
			t.Fatalf("data lost on reopen: %+v", jobs)
		}
		if err := migrate(ctx, s2.wdb, migrationFS, sqliteSQL); err != nil {
			t.Fatalf("migrate on a current database: %v", err)
		}
		s2.Close()
	}
}

func TestMigrateUpgradeThenNewerRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	path := s.Path()
	mustCreate(t, s, Job{Command: "old"})
	n := known(t)
	newer := withExtra(t, map[string]string{
		fmt.Sprintf("%04d_job_priority.sql", n+1): `ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_priority ON jobs (priority);`,
	})
	if err := migrate(ctx, s.wdb, newer, sqliteSQL); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if v := must(s.SchemaVersion(ctx))(t); v != n+1 {
		t.Fatalf("version after upgrade = %d, want %d", v, n+1)
	}
	var prio int
	if err := s.rdb.QueryRow(`SELECT priority FROM jobs`).Scan(&prio); err != nil {
		t.Fatalf("new column missing or old row lost: %v", err)
	}
	s.Close()

	_, err := Open(ctx, path)
	var sv *SchemaVersionError
	if !errors.As(err, &sv) || sv.Database != n+1 || sv.Binary != n {
		t.Fatalf("Open(newer) = %v, want SchemaVersionError{%d, %d}", err, n+1, n)
	}
	if !strings.Contains(err.Error(), "newer than this binary") {
		t.Errorf("message not clear: %v", err)
	}
	db := rawDB(t, path)
	if c := count(t, db, "schema_migrations"); c != n+1 {
		t.Errorf("refused Open changed schema_migrations: %d rows", c)
	}
	if _, err := db.Exec(`SELECT priority FROM jobs`); err != nil {
		t.Errorf("refused Open damaged the newer schema: %v", err)
	}
}

func TestMigrationFailureRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	n := known(t)
	bad := withExtra(t, map[string]string{
		fmt.Sprintf("%04d_broken.sql", n+1): `CREATE TABLE half_done (x INTEGER);
ALTER TABLE no_such_table ADD COLUMN y INTEGER;`,
	})
	if err := migrate(ctx, s.wdb, bad, sqliteSQL); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("broken migration: err = %v, want one naming it", err)
	}
	if v := must(s.SchemaVersion(ctx))(t); v != n {
		t.Errorf("version after a failed migration = %d, want %d", v, n)
	}
	var name string
	if err := s.rdb.QueryRow(`SELECT name FROM sqlite_master WHERE name = 'half_done'`).Scan(&name); err == nil {
		t.Error("a failed migration left its first statement's table behind")
	}
	// The store still works.
	mustCreate(t, s, Job{Command: "still fine"})
}

func TestMigrationNameMismatchRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	other := fstest.MapFS{"0001_something_else.sql": {Data: []byte("CREATE TABLE x (a);")}}
	err := migrate(ctx, s.wdb, other, sqliteSQL)
	if err == nil || !strings.Contains(err.Error(), "0001_something_else") {
		t.Fatalf("mismatched migration name: err = %v", err)
	}
}

func TestLoadMigrationsRejects(t *testing.T) {
	t.Parallel()
	for name, files := range map[string][]string{
		"gap":        {"0001_a.sql", "0003_c.sql"},
		"duplicate":  {"0001_a.sql", "0001_b.sql"},
		"not first":  {"0002_b.sql"},
		"short num":  {"001_a.sql"},
		"upper case": {"0001_Init.sql"},
		"other file": {"0001_a.sql", "README.md"},
		"empty":      {},
	} {
		m := fstest.MapFS{}
		for _, f := range files {
			m[f] = &fstest.MapFile{Data: []byte("SELECT 1;")}
		}
		if _, err := loadMigrations(m, sqliteSQL); err == nil {
			t.Errorf("%s: loadMigrations(%v) accepted", name, files)
		}
	}
	ms, err := loadMigrations(fstest.MapFS{"0002_b.sql": {}, "0001_a.sql": {}, "0010_j.sql": {}, "0003_c.sql": {},
		"0004_d.sql": {}, "0005_e.sql": {}, "0006_f.sql": {}, "0007_g.sql": {}, "0008_h.sql": {}, "0009_i.sql": {}}, sqliteSQL)
	if err != nil || len(ms) != 10 || ms[0].name != "0001_a" || ms[9].name != "0010_j" {
		t.Errorf("loadMigrations sorted = %+v, %v", ms, err)
	}
}

// One version sequence for both dialects: a dialect runs its own variant
// where there is one and the common file otherwise, and a version missing
// for a dialect is named.
func TestMigrationsPerDialect(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"0001_a.sql":          {Data: []byte("common 1")},
		"0001_a.postgres.sql": {Data: []byte("pg 1")},
		"0002_b.sql":          {Data: []byte("common 2")},
		"0003_c.sqlite.sql":   {Data: []byte("lite 3")},
		"0003_c.postgres.sql": {Data: []byte("pg 3")},
	}
	want := map[dialect][]string{sqliteSQL: {"common 1", "common 2", "lite 3"}, postgresSQL: {"pg 1", "common 2", "pg 3"}}
	for d, texts := range want {
		ms, err := loadMigrations(fsys, d)
		if err != nil || len(ms) != 3 {
			t.Fatalf("%s: %+v, %v", d, ms, err)
		}
		for i, m := range ms {
			if m.sql != texts[i] || m.name != []string{"0001_a", "0002_b", "0003_c"}[i] {
				t.Errorf("%s: migration %d is %s %q, want %q", d, i+1, m.name, m.sql, texts[i])
			}
		}
	}
	fsys["0004_d.sqlite.sql"] = &fstest.MapFile{Data: []byte("lite 4")}
	if _, err := loadMigrations(fsys, postgresSQL); err == nil || !strings.Contains(err.Error(), "0004_d has no file for postgres") {
		t.Errorf("a version without a postgres file: %v", err)
	}
	// This binary's own migrations load for both.
	for _, d := range []dialect{sqliteSQL, postgresSQL} {
		a, errA := loadMigrations(migrationFS, d)
		b, errB := loadMigrations(migrationFS, sqliteSQL)
		if errA != nil || errB != nil || len(a) != len(b) {
			t.Errorf("%s: %d migrations (%v), sqlite %d (%v)", d, len(a), errA, len(b), errB)
		}
	}
}

// TestOpenConcurrentFresh opens a new file from several goroutines at once:
// each migration is applied exactly once and every Open succeeds.
func TestOpenConcurrentFresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/fresh.db"
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			s, err := Open(ctx, path)
			if err != nil {
				errs <- err
				return
			}
			_, err = s.CreateJob(ctx, Job{Command: "x"})
			if err != nil {
				errs <- err
			}
			s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Open: %v", err)
	}
	db := rawDB(t, path)
	if c := count(t, db, "schema_migrations"); c != known(t) {
		t.Errorf("schema_migrations has %d rows, want %d", c, known(t))
	}
	if c := count(t, db, "jobs"); c != 6 {
		t.Errorf("jobs = %d, want 6", c)
	}
}

func TestOpenNotADatabase(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/junk.db"
	junk := []byte(strings.Repeat("this is not sqlite\n", 300))
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(context.Background(), path); err == nil {
		s.Close()
		t.Fatal("Open accepted a file that is not a database")
	}
	if got := must(os.ReadFile(path))(t); string(got) != string(junk) {
		t.Error("Open changed a file that is not a database")
	}
}

func TestRebind(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`SELECT 1`:                             `SELECT 1`,
		`a = ? AND b = ?`:                      `a = $1 AND b = $2`,
		`a = ?, b = ?2 WHERE c > ?2 AND d = ?`: `a = $1, b = $2 WHERE c > $2 AND d = $3`,
		`VALUES (?1, ?2) WHERE x <= ?2`:        `VALUES ($1, $2) WHERE x <= $2`,
		`x = '?' AND "y?" = ?`:                 `x = '?' AND "y?" = $1`,
	} {
		if got := postgresSQL.rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
		if got := sqliteSQL.rebind(in); got != in {
			t.Errorf("sqlite rebind(%q) = %q", in, got)
		}
	}
}
