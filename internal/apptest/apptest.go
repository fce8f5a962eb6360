// Package apptest builds door Apps (bot.App) for the tests of what drives
// the door from above (schedule, watchdog): an App on a store with a
// backend of the test's own (Sched), or on a lab over real SSH as `opsbot
// serve` builds it (Lab, Topology), each with a recording chat
// (internal/chatrec) as platform console; and LeaseHeld, which asks the
// store which process leads.
//
// It imports bot, so bot's own package-internal tests cannot use it (an
// import cycle): they keep the little of it they need. Only tests import
// it (internal/arch holds to that).
package apptest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// LeaseHeld returns nil when app's process holds lease key in the store
// now (by the store's clock), else an error saying what the store says,
// for tests of which process leads. It reads the store once.
func LeaseHeld(ctx context.Context, app *bot.App, key string) error {
	ls, err := app.Store.Leases(ctx)
	if err != nil {
		return fmt.Errorf("check lease %s: %w", key, err)
	}
	for _, l := range ls {
		if l.Key == key && l.Owner == app.Leases.Owner().ID && l.ExpiresAt.After(app.Store.Clock()()) {
			return nil
		}
	}
	return fmt.Errorf("lease %s is not held by this process", key)
}

// Lab returns an App on lab l over real SSH, as cmd/opsbot builds it from
// the lab's config (written to a temporary directory) plus extra YAML,
// with a recording chat as platform console. Each job runs on a runbook
// of its own with small benchmark settings (4 prompts, 2 at a time) and
// at most 16 steps. The App and its runbooks close when t ends; an error
// ends the test (t.Fatal).
func Lab(t testing.TB, l *lab.Lab, extra string) (*bot.App, *chatrec.Recorder) {
	t.Helper()
	path, err := l.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return Topology(t, l.Topology(), path, extra)
}

// Topology is Lab for any topology (a lab, or a fleet of them) whose
// config was written to path: extra is appended to that file.
func Topology(t testing.TB, topo lab.Topology, path, extra string) (*bot.App, *chatrec.Recorder) {
	t.Helper()
	return TopologyWrapped(t, topo, path, extra, nil)
}

// TopologyWrapped is Topology whose jobs run on wrap(the lab's backend),
// for a test that stands between a pipeline and the runtime (its
// reporter, its return); nil wrap is Topology.
func TopologyWrapped(t testing.TB, topo lab.Topology, path, extra string, wrap func(jobs.Backend) jobs.Backend) (*bot.App, *chatrec.Recorder) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, []byte(extra)...), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	chat := chatrec.New()
	newBackend := func(deps bot.BackendDeps) (jobs.Backend, error) {
		oc := labtest.OpsConfig(t, topo, 60*time.Second)
		oc.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 48}
		oc.MaxSteps, oc.NodeLocks = 16, deps.Nodes
		rb, err := ops.New(oc)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { rb.Close() })
		if wrap != nil {
			return wrap(jobs.RunbookBackend(rb)), nil
		}
		return jobs.RunbookBackend(rb), nil
	}
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{NewBackend: newBackend, Chats: map[string]bot.Chat{"console": chat}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return app, chat
}

// Sched returns an App on the store at path (several Apps may share one)
// whose jobs run on backend, with jobtest.Config plus extra YAML as its
// config and a recording chat as platform console. The App closes when t
// ends; an error ends the test (t.Fatal).
func Sched(t testing.TB, path string, backend jobs.Backend, extra string) (*bot.App, *chatrec.Recorder) {
	t.Helper()
	return SchedAt(t, path, backend, extra, nil)
}

// SchedAt is Sched whose door reads the clock now (time.Now when nil).
func SchedAt(t testing.TB, path string, backend jobs.Backend, extra string, now func() time.Time) (*bot.App, *chatrec.Recorder) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(jobtest.Config, path, extra)), t.TempDir(), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	chat := chatrec.New()
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{Backend: backend, Chats: map[string]bot.Chat{"console": chat}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return app, chat
}
