package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const pgPassword = "S3cr3tPassw0rd"

// store.driver picks the key that names the database; the other is refused
// by name, and store.url (which may hold a password) is never shown.
func TestStoreSection(t *testing.T) {
	t.Parallel()
	base := strings.Replace(minimal, "store: {path: opsbot.db}\n", "", 1)
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "db-url")
	if err := os.WriteFile(urlFile, []byte("postgres://opsbot:"+pgPassword+"@db.internal:5432/opsbot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := env(map[string]string{"OPSBOT_DB": "postgres://opsbot:" + pgPassword + "@db.internal/opsbot?sslmode=verify-full"})

	ok := []struct{ name, store, wantURL string }{
		{"default sqlite", "store: {path: opsbot.db}\n", ""},
		{"postgres from env", "store: {driver: postgres, url: \"${OPSBOT_DB}\"}\n", "postgres://opsbot:" + pgPassword + "@db.internal/opsbot?sslmode=verify-full"},
		{"postgres from file", "store: {driver: postgres, url: \"file:" + urlFile + "\", max_conns: 3}\n", "postgres://opsbot:" + pgPassword + "@db.internal:5432/opsbot"},
		{"postgres key=value", "store: {driver: postgres, url: \"host=/run/postgresql dbname=opsbot\"}\n", "host=/run/postgresql dbname=opsbot"},
	}
	for _, c := range ok {
		cfg, err := Parse([]byte(base+c.store), "/etc/opsbot", lookup)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.wantURL == "" {
			if cfg.Store.Driver != StoreSQLite || cfg.Store.Path != "/etc/opsbot/opsbot.db" || cfg.Store.MaxConns != 0 {
				t.Errorf("%s: store %+v, want driver sqlite at /etc/opsbot/opsbot.db", c.name, cfg.Store)
			}
			continue
		}
		if cfg.Store.Driver != StorePostgres || cfg.Store.URL.Value() != c.wantURL {
			t.Errorf("%s: driver %q url %q, want postgres %q", c.name, cfg.Store.Driver, cfg.Store.URL.Value(), c.wantURL)
		}
		if want := DefaultStoreMaxConns; !strings.Contains(c.store, "max_conns") && cfg.Store.MaxConns != want {
			t.Errorf("%s: max_conns %d, want the default %d", c.name, cfg.Store.MaxConns, want)
		}
		out, err := cfg.Redacted()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), pgPassword) || strings.Contains(string(out), "db.internal") || !strings.Contains(string(out), "url: '[redacted]'") {
			t.Errorf("%s: the effective config shows store.url:\n%s", c.name, out)
		}
	}

	bad := []struct{ name, store, want string }{
		{"unknown driver", "store: {driver: mysql, path: x.db}\n", `store.driver: "mysql" is not one of sqlite, postgres`},
		{"path with postgres", "store: {driver: postgres, url: \"${OPSBOT_DB}\", path: opsbot.db}\n", "store.path is for store.driver sqlite"},
		{"url with sqlite", "store: {path: opsbot.db, url: \"${OPSBOT_DB}\"}\n", "store.url is for store.driver postgres"},
		{"postgres without url", "store: {driver: postgres}\n", "store.url is required with store.driver postgres"},
		{"sqlite without path", "store: {driver: sqlite}\n", "store.path is required"},
		{"unset env", "store: {driver: postgres, url: \"${OPSBOT_NO_DB}\"}\n", "store.url refers to ${OPSBOT_NO_DB}"},
		{"not a url", "store: {driver: postgres, url: \"mysql://opsbot:" + pgPassword + "@db/opsbot\"}\n", "store.url is not a PostgreSQL connection string"},
		{"max_conns", "store: {driver: postgres, url: \"${OPSBOT_DB}\", max_conns: -2}\n", "store.max_conns: -2 is not in 1..1000"},
		{"max_conns with sqlite", "store: {path: opsbot.db, max_conns: 4}\n", "store.max_conns is for store.driver postgres"},
		{"url of the wrong type", "store: {driver: postgres, url: [\"postgres://opsbot:" + pgPassword + "@db/opsbot\"]}\n", "store.url: expected a string, got a list"},
	}
	for _, c := range bad {
		_, err := Parse([]byte(base+c.store), "/etc/opsbot", lookup)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to say %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), pgPassword) {
			t.Errorf("%s: the error shows store.url's password: %v", c.name, err)
		}
	}
}
