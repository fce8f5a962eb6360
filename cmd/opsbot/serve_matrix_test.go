package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/internal/dendritetest"
)

// roomEvent is one event of a room as a Matrix client sees it.
type roomEvent = dendritetest.Event

// roomWatcher keeps a Matrix client's events (dendritetest.Watch).
type roomWatcher struct{ *dendritetest.Watcher }

func watchRooms(t *testing.T, cli *mautrix.Client) *roomWatcher {
	return &roomWatcher{dendritetest.Watch(t, cli)}
}

// all returns the events kept so far that match f.
func (w *roomWatcher) all(f func(roomEvent) bool) []roomEvent { return w.All(f) }

// wait returns the first event that matches f, failing t after d (or when
// serve, p, exits first; nil: serve is not running).
func (w *roomWatcher) wait(t *testing.T, p *opsbotProc, d time.Duration, what string, f func(roomEvent) bool) roomEvent {
	t.Helper()
	if p == nil {
		return w.Wait(t, d, what, f)
	}
	return w.WaitWhile(t, d, what, p.done, func() string {
		out := "\nopsbot"
		select {
		case <-p.done:
			out += fmt.Sprintf(" exited (%v)", p.err)
		default:
		}
		return out + ":\n" + p.out.String()
	}, f)
}

// matrixRig is a real Dendrite with the accounts of an on-call team: the
// bot's, alice (operator) and carol (no role, a second client that only
// reads), all in the allowed room; the bot is also in another room, not
// allowed. config is an `opsbot serve --lab` config with a matrix section.
type matrixRig struct {
	hs                *dendritetest.Server
	bot, alice, carol *dendritetest.User
	room, other       id.RoomID
	config            string
	env               []string
	seen              *roomWatcher // carol's view of the allowed room
}

func newMatrixRig(t *testing.T) *matrixRig {
	t.Helper()
	hs := dendritetest.Start(t)
	m := &matrixRig{hs: hs, bot: hs.Register(t, "opsbot"), alice: hs.Register(t, "alice"), carol: hs.Register(t, "carol")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range []*id.RoomID{&m.room, &m.other} {
		resp, err := m.alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "public_chat", Invite: []id.UserID{m.bot.ID, m.carol.ID}})
		if err != nil {
			t.Fatalf("create room: %v", err)
		}
		*r = resp.RoomID
	}
	if _, err := m.carol.Client.JoinRoomByID(ctx, m.room); err != nil {
		t.Fatalf("carol joins: %v", err)
	}
	// The bot is in the other room already (say, allowed by an older config).
	if _, err := m.bot.Client.JoinRoomByID(ctx, m.other); err != nil {
		t.Fatalf("the bot joins the other room: %v", err)
	}
	m.seen = watchRooms(t, m.carol.Client)
	m.config = filepath.Join(t.TempDir(), "opsbot.yaml")
	m.writeConfig(t, "")
	m.env = []string{"OPSBOT_E2E_MATRIX_PASSWORD=" + m.bot.Password}
	return m
}

// writeConfig writes the rig's config: the store, the HTTP listener, alice
// an operator, and the matrix section with extra (indented keys) after it.
func (m *matrixRig) writeConfig(t *testing.T, extra string) {
	t.Helper()
	writeFile(t, m.config, `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
auth:
  default_role: none
  users: {"matrix:`+string(m.alice.ID)+`": operator}
`+m.section()+extra)
}

// section is the config's matrix section: the bot's account (its password
// from OPSBOT_E2E_MATRIX_PASSWORD, m.env) and the allowed room.
func (m *matrixRig) section() string {
	return `matrix:
  enabled: true
  homeserver: ` + m.hs.URL + `
  user_id: "` + string(m.bot.ID) + `"
  password: ${OPSBOT_E2E_MATRIX_PASSWORD}
  rooms: ["` + string(m.room) + `"]
`
}

// serve starts `opsbot serve --config FILE --lab` and waits until /readyz
// answers 200 (the adapter syncs).
func (m *matrixRig) serve(t *testing.T) (*opsbotProc, string) {
	t.Helper()
	p := startServe(t, "", m.env, "serve", "--config", m.config, "--lab")
	base := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200 with Matrix synced", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	return p, base
}

// send sends text as alice (operator) in room.
func (m *matrixRig) send(t *testing.T, room id.RoomID, text string) id.EventID {
	t.Helper()
	return m.sendAs(t, m.alice, room, text)
}

func (m *matrixRig) sendAs(t *testing.T, u *dendritetest.User, room id.RoomID, text string) id.EventID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := u.Client.SendText(ctx, room, text)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	return resp.EventID
}

// answer waits for the bot's root message answering the command cmd.
func (m *matrixRig) answer(t *testing.T, p *opsbotProc, cmd id.EventID) roomEvent {
	t.Helper()
	return m.seen.wait(t, p, 30*time.Second, "the bot's answer to "+string(cmd), func(e roomEvent) bool {
		return e.Sender == m.bot.ID && e.Type == "m.room.message" && e.ReplyTo == cmd && e.RelType == ""
	})
}

// final waits for the edit of root that shows the job ended with state.
func (m *matrixRig) final(t *testing.T, p *opsbotProc, root roomEvent, state string) roomEvent {
	t.Helper()
	return m.seen.wait(t, p, 2*time.Minute, "an edit of "+string(root.ID)+" to "+state, func(e roomEvent) bool {
		return e.Sender == m.bot.ID && e.RelType == "m.replace" && e.RelTo == root.ID && strings.Contains(e.NewBody, "— "+state)
	})
}

// TestServeMatrixMtpSteps: `opsbot serve --lab` with a matrix section, as a
// process of its own, against a real Dendrite: /readyz is 200 once it
// syncs; alice (operator) sends `!mtp steps 10` in the allowed room, and a
// second client (carol's) reads back the bot's root m.notice answering it,
// its m.replace edits up to succeeded, the m.thread replies with the steps
// and the result (tok/s, acceptance) and the ✅ reaction; `!mtp show` then
// reports steps 10. carol, without a role, is refused and nothing runs. The
// same command in a room outside matrix.rooms gets no answer. SIGTERM exits 0; a command sent while serve is down is answered
// once by the next serve, and nothing before it is answered again.
func TestServeMatrixMtpSteps(t *testing.T) {
	t.Parallel()
	m := newMatrixRig(t)
	p, _ := m.serve(t)

	m.send(t, m.other, "!mtp steps 10")
	t0 := time.Now()
	cmd := m.send(t, m.room, "!mtp steps 10")
	root := m.answer(t, p, cmd)
	firstReply := time.Since(t0)
	if root.MsgType != "m.notice" || root.HTML == "" || !strings.Contains(root.Body, "#1 `mtp steps 10") {
		t.Fatalf("root status: %+v; want an m.notice with HTML about job #1", root)
	}
	final := m.final(t, p, root, "succeeded")
	took := time.Since(t0)
	if !strings.HasPrefix(final.NewBody, "✅") || !strings.Contains(final.NewBody, "tok/s") {
		t.Errorf("final status: %q", final.NewBody)
	}
	m.seen.wait(t, p, 30*time.Second, "the result in the thread", func(e roomEvent) bool {
		return e.RelType == "m.thread" && e.RelTo == root.ID && strings.Contains(e.Body, "Result of #1")
	})
	m.seen.wait(t, p, 30*time.Second, "the ✅ reaction on the root", func(e roomEvent) bool {
		return e.Type == "m.reaction" && e.RelTo == root.ID && e.Key == "✅"
	})
	thread := m.seen.all(func(e roomEvent) bool { return e.Sender == m.bot.ID && e.RelType == "m.thread" && e.RelTo == root.ID })
	var text strings.Builder
	result := false
	for _, e := range thread {
		text.WriteString(e.Body + "\n")
		if strings.Contains(e.Body, "Result of #1") {
			result = strings.Contains(e.Body, "tok/s") && strings.Contains(e.Body, "accept") && strings.Contains(e.HTML, "<strong>Result of")
		}
	}
	for _, want := range []string{"▶ stop", "write unit", "▶ start", "wait until ready", "benchmark"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the thread has no %q step:\n%s", want, text.String())
		}
	}
	if !result {
		t.Errorf("the thread has no formatted result with tok/s and acceptance:\n%s", text.String())
	}
	edits := m.seen.all(func(e roomEvent) bool { return e.RelType == "m.replace" && e.RelTo == root.ID })
	running := 0
	for _, e := range edits {
		if strings.Contains(e.NewBody, "running") {
			running++
		}
	}
	if running == 0 {
		t.Errorf("none of the root's %d edits shows the job running", len(edits))
	}
	t.Logf("first reply %s after the command; job shown done %s after it; %d edits, %d thread messages",
		firstReply.Round(time.Millisecond), took.Round(time.Millisecond), len(edits), len(thread))

	show := m.answer(t, p, m.send(t, m.room, "!mtp show"))
	if sf := m.final(t, p, show, "succeeded"); !strings.Contains(sf.NewBody, "steps 10") {
		t.Errorf("mtp show after steps 10: %q", sf.NewBody)
	}
	refused := m.answer(t, p, m.sendAs(t, m.carol, m.room, "!mtp steps 4"))
	if !strings.Contains(refused.Body, "needs the operator role") || !strings.Contains(refused.Body, "matrix:"+string(m.carol.ID)) {
		t.Errorf("carol (no role) sent !mtp steps 4: %q; want a refusal naming the role and her id", refused.Body)
	}
	if jobs := m.answer(t, p, m.send(t, m.room, "!jobs all")).Body; !strings.Contains(jobs, "#3 `mtp steps 4 qwen` refused") {
		t.Errorf("!jobs all does not show carol's command refused (it must not have run):\n%s", jobs)
	}
	// carol reads only the allowed room; the bot's own client sees the other.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := m.bot.Client.Messages(ctx, m.other, "", "", mautrix.DirectionBackward, nil, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, evt := range msgs.Chunk {
		if evt.Sender == m.bot.ID && evt.Type == event.EventMessage {
			t.Errorf("the bot answered in a room outside matrix.rooms: %s", evt.Content.VeryRaw)
		}
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
	down := m.send(t, m.room, "!jobs")
	p, _ = m.serve(t)
	m.answer(t, p, down)
	// A marker answered after the one sent while down: by then a replay of
	// anything older would have been answered too.
	m.answer(t, p, m.send(t, m.room, "!help mtp"))
	for _, c := range []id.EventID{cmd, down} {
		if n := len(m.seen.all(func(e roomEvent) bool { return e.Sender == m.bot.ID && e.ReplyTo == c })); n != 1 {
			t.Errorf("command %s answered %d times, want once", c, n)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("the second serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}

// TestServeMatrixSIGTERMMidJob: SIGTERM to `opsbot serve` (on a lab run by
// the test: its engine loads for an hour) while alice's `!mtp steps 10`
// waits for the engine: serve exits 0 within limits.shutdown_grace, and the
// job's root notice in the room is edited one last time to say it was
// interrupted.
func TestServeMatrixSIGTERMMidJob(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	m := newMatrixRig(t)
	_, cfg, _ := sigtermLab(t, grace)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.WriteString(f, m.section())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "", m.env, "serve", "--config", cfg)
	base := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200 with Matrix synced", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	root := m.answer(t, p, m.send(t, m.room, "!mtp steps 10"))
	m.seen.wait(t, p, time.Minute, "the job waiting for the engine", func(e roomEvent) bool {
		return e.RelType == "m.replace" && e.RelTo == root.ID && strings.Contains(e.NewBody, "wait until ready")
	})
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t, 2*grace+10*time.Second)
	took := time.Since(t0)
	if code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
	if took > grace+2*time.Second {
		t.Errorf("exit took %s, more than the grace %s", took, grace)
	}
	final := m.seen.wait(t, nil, 30*time.Second, "the root edited to interrupted", func(e roomEvent) bool {
		return e.Sender == m.bot.ID && e.RelType == "m.replace" && e.RelTo == root.ID && strings.Contains(e.NewBody, "— interrupted")
	})
	t.Logf("SIGTERM to exit %s (grace %s); last status: %s", took.Round(time.Millisecond), grace, final.NewBody)
}
