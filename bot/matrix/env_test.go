package matrix_test

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/dendritetest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// env is a real Dendrite, the lab, and the accounts and rooms of an on-call
// team: alice (operator) and bob (no role) in the allowed room.
type env struct {
	t     testing.TB
	hs    *dendritetest.Server
	lab   *lab.Lab
	cfg   *config.Config
	botU  *dendritetest.User
	alice *dendritetest.User
	bob   *dendritetest.User
	room  id.RoomID // in matrix.rooms
	other id.RoomID // not: the bot was made to join it before it started
	seen  *watcher  // alice's view of both rooms

	keyWait time.Duration // the adapter's KeyWait, when set
	http    *http.Client  // the adapter's HTTPClient, when set
}

func newEnv(t testing.TB) *env {
	t.Helper()
	hs := dendritetest.Start(t)
	e := &env{t: t, hs: hs}
	e.botU = hs.Register(t, "opsbot")
	e.alice = hs.Register(t, "alice")
	e.bob = hs.Register(t, "bob")
	ctx := testkit.Context(t, time.Minute)
	for _, r := range []*id.RoomID{&e.room, &e.other} {
		resp, err := e.alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "public_chat",
			Invite: []id.UserID{e.botU.ID, e.bob.ID}})
		if err != nil {
			t.Fatalf("create room: %v", err)
		}
		*r = resp.RoomID
	}
	if _, err := e.bob.Client.JoinRoomByID(ctx, e.room); err != nil {
		t.Fatalf("bob joins: %v", err)
	}
	// The bot is in the other room already (say, allowed by an older config).
	if _, err := e.botU.Client.JoinRoomByID(ctx, e.other); err != nil {
		t.Fatalf("bot joins the other room: %v", err)
	}
	e.seen = dendritetest.Watch(t, e.alice.Client)

	e.lab = labtest.Start(t, lab.Options{})
	for _, svc := range e.lab.Topology().Services {
		if err := e.lab.WaitReady(ctx, svc.Name); err != nil {
			t.Fatalf("lab service %s: %v", svc.Name, err)
		}
	}
	dir := t.TempDir()
	p, err := e.lab.WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = filepath.Join(dir, "opsbot.db")
	cfg.Matrix = &config.Matrix{Enabled: true, Homeserver: hs.URL, UserID: string(e.botU.ID),
		Password: config.Secret(e.botU.Password), Rooms: []string{string(e.room)},
		StaleAfter: config.Duration(config.DefaultMatrixStaleAfter)}
	cfg.Auth.DefaultRole = "none"
	cfg.Auth.Users = map[string]config.Grant{"matrix:" + string(e.alice.ID): config.RoleEverywhere("operator")}
	e.cfg = cfg
	return e
}

// instance is one opsbot process: an App with the Matrix adapter running.
type instance struct {
	app     *bot.App
	adapter *matrix.Adapter
	stop    func() // stops the adapter (and waits for Run to return), then the app
}

// start runs an opsbot on the env's store; now, when set, is the adapter's
// clock.
func (e *env) start(now func() time.Time) *instance {
	t := e.t
	t.Helper()
	log := testkit.Logger(t)
	a, err := matrix.New(*e.cfg.Matrix, matrix.Options{Logger: log, HTTPClient: e.http})
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		a.Now = now
	}
	if e.keyWait > 0 {
		a.KeyWait = e.keyWait
	}
	ctx := testkit.Context(t, time.Minute)
	newBackend := func(deps bot.BackendDeps) (jobs.Backend, error) {
		rb, err := runbook(e.cfg, deps.Nodes, log)
		if err != nil {
			return nil, err
		}
		return jobs.RunbookBackend(rb), nil
	}
	// As `opsbot serve` does: the adapter keeps its state in the bot's
	// store and holds its sync with the runtime's locker.
	opened := func(st *store.Store, locker *leases.Leases) error {
		a.Attach(matrix.Deps{State: st, Locker: locker, Keys: st})
		return nil
	}
	app, err := bot.NewApp(ctx, e.cfg, bot.AppOptions{NewBackend: newBackend, Chats: map[string]bot.Chat{matrix.Platform: a}, Logger: log,
		Now: now, Opened: opened})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx, app.Dispatcher) }()
	var once sync.Once
	in := &instance{app: app, adapter: a}
	in.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("adapter Run: %v", err)
			}
			app.Close()
		})
	}
	t.Cleanup(in.stop)
	return in
}

// openStore opens the env's store for the test, closed at its end: what an
// adapter that does not run in an App is attached to.
func (e *env) openStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(testkit.Context(t, 30*time.Second), e.cfg.Store.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// waitReady waits until the instance syncs.
func (in *instance) waitReady(t testing.TB) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "the adapter to sync", func() bool { return in.adapter.Ready() == nil })
}

// runbook builds the ops layer from cfg, as opsbot's main does.
func runbook(cfg *config.Config, nodes ops.Locker, log *slog.Logger) (*ops.Runbook, error) {
	oc := ops.Config{KeyFile: cfg.SSH.KeyFile, KnownHosts: cfg.SSH.KnownHosts, ConnectTimeout: cfg.SSH.ConnectTimeout.D(),
		KeepAlive: cfg.SSH.KeepAlive.D(), Hosts: map[string]ops.HostConfig{}, Services: map[string]ops.ServiceConfig{},
		Bench: ops.BenchDefaults{Prompts: cfg.Bench.Prompts, Concurrency: cfg.Bench.Concurrency,
			InputLen: cfg.Bench.InputLen, OutputLen: cfg.Bench.OutputLen},
		MaxSteps: cfg.Limits.MaxSteps, NodeLocks: nodes, Logger: log}
	for name, h := range cfg.Hosts {
		oc.Hosts[name] = ops.HostConfig{Addr: h.Addr, User: h.User, Jump: h.Jump, Prefix: h.Prefix}
	}
	for name, s := range cfg.Services {
		sc := ops.ServiceConfig{Host: s.Host, Unit: s.Unit, URL: s.URL, Engine: s.Engine, GPUs: s.GPUs,
			DropIn: s.Edit == "drop-in", ReadyTimeout: s.ReadyTimeout.D(), ClearMiB: s.ClearMiB, DefaultSteps: s.DefaultSteps}
		if s.Proxmox != nil {
			sc.ProxmoxNode, sc.VMID = s.Proxmox.Node, s.Proxmox.VMID
		}
		oc.Services[name] = sc
	}
	return ops.New(oc)
}

// send posts a text message as u and returns its event id.
func send(t testing.TB, u *dendritetest.User, room id.RoomID, text string) id.EventID {
	t.Helper()
	resp, err := u.Client.SendText(testkit.Context(t, 30*time.Second), room, text)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	return resp.EventID
}

// msg is one event as a client sees it; watcher keeps a client's.
type (
	msg     = dendritetest.Event
	watcher = dendritetest.Watcher
)
