package app_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the SQLite driver, for the test's own connection that locks the file

	"github.com/opsbot/opsbot/app"
	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/apptest"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/serve"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/schedule"
	"github.com/opsbot/opsbot/store"
	"github.com/opsbot/opsbot/watchdog"
)

// leaseTTL is limits.lease_ttl of these tests.
const leaseTTL = 3 * time.Second

// TestLeadersRetakeTheirLeasesWhenTheStoreReturns: the store goes away for
// longer than lease_ttl under a serving process that holds the scheduler's
// and the watchdog's leases; no schedule exists and the watchdog's next
// pass is a minute away, so nothing falls due. Once the store is back, both
// leases are held again within lease_ttl, by the store and by
// opsbot_lease_held, and they stay held: a release that failed while the
// store was away does not end the lease taken again. Away is, on
// PostgreSQL, the network cut (pgtest.Proxy); on SQLite, another
// connection holding the file's write lock (as a `sqlite3` shell in a
// transaction does), so that every write waits and fails busy.
func TestLeadersRetakeTheirLeasesWhenTheStoreReturns(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "opsbot.db")
		var lock *sql.Tx
		locker := openLocker(t, path)
		testLeadersRetake(t, "{path: "+path+"}", func() {
			var err error
			if lock, err = locker.BeginTx(context.Background(), nil); err == nil {
				_, err = lock.Exec(`INSERT INTO kv (key, value, updated_at) VALUES ('lease-test', 'x', 0)
					ON CONFLICT (key) DO UPDATE SET value = excluded.value`)
			}
			if err != nil {
				t.Fatalf("take the file's write lock: %v", err)
			}
			t.Cleanup(func() { _ = lock.Rollback() }) // a test that failed meanwhile gives it back before the App stops
		}, func() {
			if err := lock.Rollback(); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.Skip(t)
		proxy, url := pgtest.NewProxy(t, pgtest.Database(t))
		testLeadersRetake(t, fmt.Sprintf("{driver: postgres, url: %q}", url), proxy.Cut, proxy.Restore)
	})
}

// openLocker opens a connection of the test's own to the SQLite file at
// path, whose write transaction holds the file's write lock. It waits
// (busy_timeout) for a write of the App's in progress to end, as the
// store's own connections do.
func openLocker(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func testLeadersRetake(t *testing.T, storeYAML string, away, back func()) {
	ctx := context.Background()
	var logs testkit.Buffer
	a := newApp(t, storeYAML, &logs)
	svc, err := app.StartService(ctx, a, app.ServiceOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(5 * time.Second) })
	// As `opsbot serve` exports it (cmd/opsbot/serve.go).
	m := serve.NewMetrics(serve.BuildInfo("test", "test"), nil)
	keys := []string{schedule.SchedulerLease, watchdog.WatchdogLease}
	m.ExportLeases(keys, func(key string) (bool, bool) { return a.Leases.Holds(key), true })

	// held reports whether opsbot_lease_held reads want for both leases
	// and, when want is 1, whether the store says this process holds them.
	held := func(want float64) bool {
		for _, k := range keys {
			if v, ok := leaseGauge(t, m, k); !ok || v != want {
				return false
			}
			if want == 1 && apptest.LeaseHeld(ctx, a, k) != nil {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 15*time.Second, "both leases held at start", func() bool { return held(1) })

	away()
	t0 := time.Now()
	testkit.WaitFor(t, store.BusyTimeout+4*leaseTTL, "both leases no longer held while the store is away", func() bool { return held(0) })
	t.Logf("leases no longer held %s after the store went away", time.Since(t0).Round(time.Millisecond))
	// The store stays away longer than lease_ttl, and until the leaders let
	// their lost leases go and those releases failed, to be retried by the
	// heartbeat (as in the outage this test stands for). A leader that does
	// not notice its loss never lets go: then the store returns after the
	// deadline.
	released := false
	testkit.Poll(store.BusyTimeout+4*leaseTTL, func() bool {
		s := logs.String()
		released = true
		for _, k := range keys {
			released = released && strings.Contains(s, `msg="release lease (retried at the next heartbeat)" lease=`+k+" ")
		}
		return released && time.Since(t0) > leaseTTL
	})
	t.Logf("the store returns %s after it went away; both leaders' releases failed meanwhile: %t", time.Since(t0).Round(time.Millisecond), released)
	back()
	t1 := time.Now()
	if !testkit.Poll(leaseTTL, func() bool { return held(1) }) {
		t.Fatalf("the leases are not held again within lease_ttl %s of the store's return (metric scheduler, watchdog: %s)\n%s",
			leaseTTL, gauges(t, m, keys), logs.String())
	}
	t.Logf("leases held again %s after the store's return", time.Since(t1).Round(time.Millisecond))
	// Two heartbeats later (each retries the releases that failed) they
	// are still held.
	beats := 0
	last := heartbeatAt(t, a)
	testkit.WaitFor(t, 4*leaseTTL, "two heartbeats after the leases were taken again", func() bool {
		if !held(1) {
			t.Fatalf("a lease taken again was lost (metric scheduler, watchdog: %s)\n%s", gauges(t, m, keys), logs.String())
		}
		if hb := heartbeatAt(t, a); hb.After(last) {
			beats, last = beats+1, hb
		}
		return beats >= 2
	})
}

// newApp builds an App on the store storeYAML describes, as the tests of
// the scheduler do (apptest.Sched), logging to logs, with lease_ttl leaseTTL.
func newApp(t *testing.T, storeYAML string, logs *testkit.Buffer) *bot.App {
	t.Helper()
	text := strings.Replace(jobtest.Config, "store: {path: %s}", "store: "+strings.ReplaceAll(storeYAML, "%", "%%"), 1)
	if text == jobtest.Config {
		t.Fatal("jobtest.Config has no store line to replace")
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(text, fmt.Sprintf("limits: {lease_ttl: %s}", leaseTTL))), t.TempDir(),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{Backend: jobtest.OK(),
		Chats: map[string]bot.Chat{"console": chatrec.New()}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// heartbeatAt is when the App's process last renewed itself in the store.
func heartbeatAt(t *testing.T, a *bot.App) time.Time {
	t.Helper()
	owners, err := a.Store.Owners(context.Background())
	if err != nil {
		return time.Time{}
	}
	for _, o := range owners {
		if o.ID == a.Leases.Owner().ID {
			return o.HeartbeatAt
		}
	}
	return time.Time{}
}

// leaseGauge reads opsbot_lease_held{lease=key} from m.
func leaseGauge(t *testing.T, m *serve.Metrics, key string) (float64, bool) {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "opsbot_lease_held" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "lease" && l.GetValue() == key {
					return mt.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func gauges(t *testing.T, m *serve.Metrics, keys []string) string {
	var out []string
	for _, k := range keys {
		v, ok := leaseGauge(t, m, k)
		if !ok {
			out = append(out, "unknown")
			continue
		}
		out = append(out, fmt.Sprint(v))
	}
	return strings.Join(out, ", ")
}
