package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/opsbot/opsbot/internal/pgtest"
)

// Processes that start together on a new PostgreSQL database migrate it
// one after the other under schema_migrations' table lock: every open
// succeeds and each migration is recorded once.
func TestPostgresOpenConcurrentFresh(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	url := pgtest.Database(t)
	const n = 6
	var wg sync.WaitGroup
	stores := make([]*Store, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = OpenPostgres(ctx, url, 2) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	ms, err := loadMigrations(migrationFS, postgresSQL)
	if err != nil {
		t.Fatal(err)
	}
	var rows, distinct int
	if err := stores[0].rdb.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != len(ms) || distinct != len(ms) {
		t.Errorf("schema_migrations has %d rows (%d versions), want %d", rows, distinct, len(ms))
	}
}

// A PostgreSQL database migrated by a newer opsbot is refused, unchanged,
// at open and by CheckConfig.
func TestPostgresNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	url := pgtest.Database(t)
	s := openURL(t, url)
	if _, err := s.rdb.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future', 0)`); err != nil {
		t.Fatal(err)
	}
	var sv *SchemaVersionError
	if _, err := OpenPostgres(ctx, url, 0); !errors.As(err, &sv) || sv.Database != 999 {
		t.Errorf("open of a newer schema: %v, want a *SchemaVersionError for 999", err)
	}
	if err := CheckConfig(ctx, Config{Driver: "postgres", URL: url}); !errors.As(err, &sv) {
		t.Errorf("CheckConfig of a newer schema: %v", err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != 999 {
		t.Errorf("schema version after the refusals: %d, %v", v, err)
	}
}

// The audit log is append-only on PostgreSQL too, whoever writes to the
// database: UPDATE, DELETE and TRUNCATE are refused by its triggers.
func TestPostgresAuditAppendOnly(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	s := openURL(t, pgtest.Database(t))
	if err := s.AppendAudit(ctx, AuditEntry{User: "U1", Decision: DecisionAccepted}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`UPDATE audit_log SET user_id = 'U2'`, `DELETE FROM audit_log`, `TRUNCATE audit_log`} {
		if _, err := s.rdb.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "audit_log is append-only") {
			t.Errorf("%s: %v, want refused as append-only", q, err)
		}
	}
	if n := count(t, s.rdb, "audit_log"); n != 1 {
		t.Errorf("%d audit entries, want 1", n)
	}
}

// A server without TLS, asked for it by store.url's sslmode (README's remote
// example, verify-full, against a local cluster), is refused with what to
// do: sslmode=disable on this machine, or TLS on the server.
func TestPostgresRefusedTLSSaysWhatToDo(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	url := strings.Replace(pgtest.Database(t), "sslmode=disable", "sslmode=require", 1)
	ctx := context.Background()
	want := "the server does not offer TLS, and store.url's sslmode requires it: for a cluster on this machine use sslmode=disable"
	if s, err := OpenPostgres(ctx, url, 1); err == nil || !strings.Contains(err.Error(), want) {
		if s != nil {
			s.Close()
		}
		t.Errorf("open: %v\nwant %q", err, want)
	}
	if err := CheckConfig(ctx, Config{Driver: "postgres", URL: url}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("check: %v\nwant %q", err, want)
	}
}
