package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/pgtest"
)

// driver opens the stores of a test that runs against each of the store's
// drivers (eachDriver).
type driver struct {
	name string
	pg   bool
	urls *sync.Map // postgres: path -> database URL, so openAt of one path opens one database
}

var drivers = []driver{{name: "sqlite"}, {name: "postgres", pg: true, urls: &sync.Map{}}}

// eachDriver runs test once per driver, as subtests named by the driver.
// PostgreSQL's subtest skips (or fails, with OPSBOT_REQUIRE_POSTGRES=1)
// where PostgreSQL is not installed.
func eachDriver(t *testing.T, test func(t *testing.T, drv driver)) {
	t.Helper()
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			if d.pg {
				pgtest.Skip(t)
			}
			test(t, d)
		})
	}
}

// openTemp opens a fresh, empty store of the driver, closed at cleanup.
func (d driver) openTemp(t testing.TB) *Store {
	t.Helper()
	if !d.pg {
		return openTemp(t)
	}
	return openURL(t, pgtest.Database(t))
}

// openAt opens the store at path: for postgres, the database that stands
// for path in this test binary (created on first use), so that two calls
// with one path are two processes on one database.
func (d driver) openAt(t testing.TB, path string) *Store {
	t.Helper()
	if !d.pg {
		return openAt(t, path)
	}
	u, ok := d.urls.Load(path)
	if !ok {
		u, _ = d.urls.LoadOrStore(path, pgtest.Database(t))
	}
	return openURL(t, u.(string))
}

func openURL(t testing.TB, url string) *Store {
	t.Helper()
	s, err := OpenPostgres(context.Background(), url, 0)
	if err != nil {
		t.Fatalf("OpenPostgres: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// openTemp opens a store in a fresh temporary directory, closed at cleanup.
func openTemp(t testing.TB) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "opsbot.db"))
}

func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// rawDB opens a second, independent handle on the store's file, as another
// tool or process would.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t testing.TB, db interface {
	QueryRow(string, ...any) *sql.Row
}, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func mustCreate(t testing.TB, s *Store, j Job) Job {
	t.Helper()
	j, err := s.CreateJob(context.Background(), j)
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	return j
}

// sameTime fails unless a and b are the same instant.
func sameTime(t testing.TB, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
	if !got.IsZero() && got.Location() != time.UTC {
		t.Errorf("%s is in %v, want UTC", what, got.Location())
	}
}

// must(v, err)(t) returns v, failing the test at once when err is not nil:
// a check on a value that could not be read must not pass on its zero value.
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// open is Open (or OpenPostgres, on the database that stands for path),
// without a cleanup: the caller closes the store.
func (d driver) open(t testing.TB, path string) (*Store, error) {
	t.Helper()
	if !d.pg {
		return Open(context.Background(), path)
	}
	u, ok := d.urls.Load(path)
	if !ok {
		u, _ = d.urls.LoadOrStore(path, pgtest.Database(t))
	}
	return OpenPostgres(context.Background(), u.(string), 0)
}

// where is what names the store at path for another process: the path,
// or the URL of the database that stands for it.
func (d driver) where(t testing.TB, path string) string {
	t.Helper()
	if !d.pg {
		return path
	}
	u, ok := d.urls.Load(path)
	if !ok {
		u, _ = d.urls.LoadOrStore(path, pgtest.Database(t))
	}
	return u.(string)
}
