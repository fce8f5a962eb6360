package jobs

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// TestReloadClosesReplacedRunbook: a reload (SIGHUP) puts a new runbook in
// effect; the one it replaced keeps its SSH connections while a job started
// on it runs, and closes them when that job ends; one no job uses is closed
// at once. Reload after reload, opsbot holds the connections of one runbook
// (and of those still finishing jobs), not of every config it ever had.
func TestReloadClosesReplacedRunbook(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := labtest.Start(t, lab.Options{})
	path, err := l.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var rbs Runbooks
	defer rbs.Close()
	nodes := newTestLeases(t)
	build := func(*config.Config) (*ops.Runbook, error) { return labtest.Runbook(t, l, nodes) }
	rb, err := build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rbs.Set(rb)
	// What takes the config for later requests (the App) takes it.
	var reloaded int
	app := reloaderFunc(func(*config.Config) error { reloaded++; return nil })
	show, err := commands.Parse("mtp show", cfg.CommandOptions())
	if err != nil {
		t.Fatal(err)
	}
	connected := func(rb *ops.Runbook) bool {
		for _, h := range rb.SSHStats() {
			if h.Connected {
				return true
			}
		}
		return false
	}
	run := func() {
		t.Helper()
		if _, err := rbs.Run(ctx, ops.JobHold{}, show.(commands.Job), ops.Discard); err != nil {
			t.Fatalf("mtp show: %v", err)
		}
	}

	run()
	rb1 := rbs.cur.Load()
	if !connected(rb1) {
		t.Fatal("after a job the runbook has no SSH connection to reuse")
	}
	job := rbs.take() // a job still running on rb1
	if err := rbs.Reload(app, cfg, build); err != nil {
		t.Fatal(err)
	}
	rb2 := rbs.cur.Load()
	if rb2 == rb1 {
		t.Fatal("reload kept the old runbook in effect")
	}
	if !connected(rb1) || rbs.Open() != 2 {
		t.Fatalf("while a job runs on the replaced runbook: connected %v, %d open; want its connections kept, 2 open",
			connected(rb1), rbs.Open())
	}
	run()
	if !connected(rb2) {
		t.Fatal("a job after the reload did not run on the new runbook")
	}
	rbs.done(job)
	if connected(rb1) || rbs.Open() != 1 {
		t.Fatalf("after the replaced runbook's last job: connected %v, %d open; want it closed, 1 open", connected(rb1), rbs.Open())
	}
	if err := rbs.Reload(app, cfg, build); err != nil {
		t.Fatal(err)
	}
	if connected(rb2) || rbs.Open() != 1 {
		t.Fatalf("a runbook no job uses, replaced: connected %v, %d open; want it closed at once, 1 open", connected(rb2), rbs.Open())
	}
	run()
	if reloaded != 2 {
		t.Errorf("the config was given to later requests %d times, want 2", reloaded)
	}
}

// reloaderFunc is a Reloader.
type reloaderFunc func(*config.Config) error

func (f reloaderFunc) Reload(cfg *config.Config) error { return f(cfg) }

// newTestLeases opens a store of t's own and a lease owner on it (TTL 3 s,
// no heartbeat running), the runbook's node locker, closed when t ends.
func newTestLeases(t *testing.T) *leases.Leases {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := leases.New(ctx, st, leases.Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}
