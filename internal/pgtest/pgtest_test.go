package pgtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/opsbot/opsbot/internal/testrun"
)

func TestMain(m *testing.M) { testrun.Main(m) }

// Two databases from one cluster are separate, and each is usable.
func TestDatabasesAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := Database(t), Database(t)
	if a == b {
		t.Fatalf("two calls gave the same database %s", a)
	}
	for _, u := range []string{a, b} {
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(context.Background(), "CREATE TABLE x (id int)"); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
	}
}
