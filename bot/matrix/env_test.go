package matrix_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/dendritetest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
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
}

func newEnv(t testing.TB) *env {
	t.Helper()
	hs := dendritetest.Start(t)
	e := &env{t: t, hs: hs}
	e.botU = hs.Register(t, "opsbot")
	e.alice = hs.Register(t, "alice")
	e.bob = hs.Register(t, "bob")
	ctx := testCtx(t, time.Minute)
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
	e.seen = watch(t, e.alice.Client)

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
	cfg.Auth.Users = map[string]string{"matrix:" + string(e.alice.ID): "operator"}
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
	log := testLogger(t)
	a, err := matrix.New(*e.cfg.Matrix, matrix.Options{StorePath: e.cfg.Store.Path, LeaseTTL: e.cfg.Limits.LeaseTTL.D(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		a.Now = now
	}
	if e.keyWait > 0 {
		a.KeyWait = e.keyWait
	}
	ctx := testCtx(t, time.Minute)
	newBackend := func(deps bot.BackendDeps) (bot.Backend, error) { return runbook(e.cfg, deps.Nodes, log) }
	app, err := bot.NewApp(ctx, e.cfg, bot.AppOptions{NewBackend: newBackend, Chats: map[string]bot.Chat{matrix.Platform: a}, Logger: log})
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

// waitReady waits until the instance syncs.
func (in *instance) waitReady(t testing.TB) {
	t.Helper()
	poll(t, 30*time.Second, "the adapter to sync", func() bool { return in.adapter.Ready() == nil })
}

// runbook builds the ops layer from cfg, as opsbot's main does.
func runbook(cfg *config.Config, nodes ops.NodeLocker, log *slog.Logger) (*ops.Runbook, error) {
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
	resp, err := u.Client.SendText(testCtx(t, 30*time.Second), room, text)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	return resp.EventID
}

// msg is one event as a client sees it.
type msg struct {
	Room     id.RoomID
	ID       id.EventID
	Sender   id.UserID
	Type     string
	At       time.Time // when the watcher received it
	TS       time.Time // origin_server_ts: when the homeserver took it
	MsgType  string
	Body     string
	HTML     string
	NewBody  string // m.new_content's body, on an edit
	RelType  string
	RelTo    id.EventID
	ReplyTo  id.EventID
	Key      string // a reaction's key
	Member   string // a membership, on m.room.member
	StateKey string
	// Encrypted: the event came as m.room.encrypted, and this is what
	// decrypting it gave (crypto_test.go's watcher).
	Encrypted bool
}

// watcher syncs a client and keeps every event of its rooms.
type watcher struct {
	mu   sync.Mutex
	msgs []msg
	wake chan struct{}
}

func watch(t testing.TB, cli *mautrix.Client) *watcher {
	w := &watcher{wake: make(chan struct{}, 1)}
	syncLoop(t, cli, func(_ context.Context, resp *mautrix.RespSync, _ string) {
		now := time.Now()
		var got []msg
		for room, jr := range resp.Rooms.Join {
			for _, evt := range append(jr.State.Events, jr.Timeline.Events...) {
				got = append(got, parse(room, evt, now))
			}
		}
		w.add(got)
	})
	return w
}

// syncLoop syncs cli until the test ends, handing each response to handle.
func syncLoop(t testing.TB, cli *mautrix.Client, handle func(ctx context.Context, resp *mautrix.RespSync, since string)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		since := ""
		for ctx.Err() == nil {
			resp, err := cli.FullSyncRequest(ctx, mautrix.ReqSync{Timeout: 10000, Since: since})
			if err != nil {
				if ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond) // a failed sync: retry soon (not a test timing)
				}
				continue
			}
			handle(ctx, resp, since)
			since = resp.NextBatch
		}
	}()
}

// add keeps ms and wakes the waiters.
func (w *watcher) add(ms []msg) {
	w.mu.Lock()
	w.msgs = append(w.msgs, ms...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func parse(room id.RoomID, evt *event.Event, at time.Time) msg {
	m := msg{Room: room, ID: evt.ID, Sender: evt.Sender, Type: evt.Type.Type, At: at, TS: time.UnixMilli(evt.Timestamp)}
	if evt.StateKey != nil {
		m.StateKey = *evt.StateKey
	}
	var c struct {
		MsgType       string `json:"msgtype"`
		Body          string `json:"body"`
		FormattedBody string `json:"formatted_body"`
		Membership    string `json:"membership"`
		NewContent    *struct {
			Body string `json:"body"`
		} `json:"m.new_content"`
		RelatesTo *struct {
			RelType   string     `json:"rel_type"`
			EventID   id.EventID `json:"event_id"`
			Key       string     `json:"key"`
			InReplyTo *struct {
				EventID id.EventID `json:"event_id"`
			} `json:"m.in_reply_to"`
		} `json:"m.relates_to"`
	}
	_ = json.Unmarshal(evt.Content.VeryRaw, &c)
	m.MsgType, m.Body, m.HTML, m.Member = c.MsgType, c.Body, c.FormattedBody, c.Membership
	if c.NewContent != nil {
		m.NewBody = c.NewContent.Body
	}
	if r := c.RelatesTo; r != nil {
		m.RelType, m.RelTo, m.Key = r.RelType, r.EventID, r.Key
		if r.InReplyTo != nil {
			m.ReplyTo = r.InReplyTo.EventID
		}
	}
	return m
}

// all returns the events kept so far that match f.
func (w *watcher) all(f func(msg) bool) []msg {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []msg
	for _, m := range w.msgs {
		if f(m) {
			out = append(out, m)
		}
	}
	return out
}

// wait returns the first event that matches f, waiting up to d for it.
func (w *watcher) wait(t testing.TB, d time.Duration, what string, f func(msg) bool) msg {
	t.Helper()
	deadline := time.After(d)
	for {
		if ms := w.all(f); len(ms) > 0 {
			return ms[0]
		}
		select {
		case <-w.wake:
		case <-deadline:
			t.Fatalf("no %s within %s; seen:\n%s", what, d, w.dump())
		}
	}
}

func (w *watcher) dump() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, m := range w.msgs {
		if m.Type == "m.room.message" || m.Type == "m.reaction" {
			fmt.Fprintf(&b, "  %s %s %s rel=%s:%s reply=%s %q %q\n", m.ID, m.Sender, m.Type, m.RelType, m.RelTo, m.ReplyTo, m.Body, m.NewBody)
		}
	}
	return b.String()
}

func poll(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("OPSBOT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
