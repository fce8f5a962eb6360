//go:build goolm

package matrix_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/internal/dendritetest"
	"github.com/opsbot/opsbot/store"
)

// e2eeMember is a room member with a client that does end-to-end
// encryption as Element does (mautrix's OlmMachine, its keys in memory): it
// sends encrypted messages and keeps what it decrypts in seen.
type e2eeMember struct {
	u    *dendritetest.User
	mach *crypto.OlmMachine
	seen *watcher

	mu      sync.Mutex
	pending []pendingEvent // events whose room key has not arrived yet
}

type pendingEvent struct {
	room id.RoomID
	evt  *event.Event
}

// newE2EEMember uploads u's device keys and starts its sync.
func newE2EEMember(t testing.TB, u *dendritetest.User) *e2eeMember {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	states := mautrix.NewMemoryStateStore()
	u.Client.StateStore = states
	m := &e2eeMember{u: u, seen: &watcher{wake: make(chan struct{}, 1)}}
	m.mach = crypto.NewOlmMachine(u.Client, nil, crypto.NewMemoryStore(nil), states.(crypto.StateStore))
	if err := m.mach.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.mach.ShareKeys(ctx, -1); err != nil {
		t.Fatalf("upload %s's device keys: %v", u.ID, err)
	}
	syncLoop(t, u.Client, m.handle)
	return m
}

// handle takes one sync response: room keys first, then the rooms' state,
// then their timelines, decrypting what it can (and, again, what waited for
// a key).
func (m *e2eeMember) handle(ctx context.Context, resp *mautrix.RespSync, since string) {
	m.mach.ProcessSyncResponse(ctx, resp, since)
	now := time.Now()
	var got []msg
	for room, jr := range resp.Rooms.Join {
		for _, evt := range append(jr.State.Events, jr.Timeline.Events...) {
			if evt.StateKey == nil {
				continue
			}
			evt.RoomID, evt.Type.Class = room, event.StateEventType
			if evt.Content.ParseRaw(evt.Type) == nil {
				mautrix.UpdateStateStore(ctx, m.u.Client.StateStore, evt)
				if evt.Type == event.StateMember {
					m.mach.HandleMemberEvent(ctx, evt)
				}
			}
		}
		for _, evt := range jr.Timeline.Events {
			evt.RoomID = room
			got = append(got, parse(room, evt, now))
			if evt.Type == event.EventEncrypted {
				m.mu.Lock()
				m.pending = append(m.pending, pendingEvent{room, evt})
				m.mu.Unlock()
			}
		}
	}
	m.mu.Lock()
	var still []pendingEvent
	for _, p := range m.pending {
		evt := p.evt
		evt.Type.Class = event.MessageEventType
		if evt.Content.Parsed == nil && evt.Content.ParseRaw(event.EventEncrypted) != nil {
			continue
		}
		dec, err := m.mach.DecryptMegolmEvent(ctx, evt)
		if errors.Is(err, crypto.ErrNoSessionFound) {
			still = append(still, p)
			continue
		}
		if err != nil {
			continue
		}
		d := parse(p.room, dec, now)
		d.Encrypted = true
		if outer := evt.Content.AsEncrypted().RelatesTo; d.RelType == "" && outer != nil {
			// The relation travels in the clear.
			d.RelType, d.RelTo = string(outer.Type), outer.EventID
		}
		got = append(got, d)
	}
	m.pending = still
	m.mu.Unlock()
	m.seen.add(got)
}

// send sends text to room encrypted, sharing a room key with the room's
// members' devices first when there is none yet.
func (m *e2eeMember) send(t testing.TB, room id.RoomID, text string) id.EventID {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	content := &event.MessageEventContent{MsgType: event.MsgText, Body: text}
	enc, err := m.mach.EncryptMegolmEvent(ctx, room, event.EventMessage, content)
	if errors.Is(err, crypto.ErrNoGroupSession) || errors.Is(err, crypto.ErrSessionNotShared) || errors.Is(err, crypto.ErrSessionExpired) {
		joined, jerr := m.u.Client.JoinedMembers(ctx, room)
		if jerr != nil {
			t.Fatal(jerr)
		}
		var members []id.UserID
		for u := range joined.Joined {
			members = append(members, u)
		}
		if err := m.mach.ShareGroupSession(ctx, room, members); err != nil {
			t.Fatalf("share a room key: %v", err)
		}
		enc, err = m.mach.EncryptMegolmEvent(ctx, room, event.EventMessage, content)
	}
	if err != nil {
		t.Fatalf("encrypt %q: %v", text, err)
	}
	resp, err := m.u.Client.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	return resp.EventID
}

// encryptedEnv is an env whose only allowed room is encrypted, with alice's
// client encrypting, and the bot started and joined there.
func encryptedEnv(t testing.TB, keyWait time.Duration) (*env, *e2eeMember, id.RoomID, *instance) {
	t.Helper()
	e := newEnv(t)
	e.keyWait = keyWait
	alice := newE2EEMember(t, e.alice)
	room := e.encryptedRoom(t)
	in := e.start(nil)
	poll(t, 30*time.Second, "the adapter to sync", func() bool { return in.adapter.Ready() == nil })
	poll(t, 30*time.Second, "the bot to join the encrypted room", func() bool {
		j, err := e.alice.Client.JoinedMembers(testCtx(t, 10*time.Second), room)
		return err == nil && hasMember(j, e.botU.ID)
	})
	return e, alice, room, in
}

// encryptedRoom makes an encrypted room of alice's with the bot and bob
// invited, and makes it the only room in matrix.rooms, with encryption on.
func (e *env) encryptedRoom(t testing.TB) id.RoomID {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	resp, err := e.alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat",
		Invite: []id.UserID{e.botU.ID, e.bob.ID},
		InitialState: []*event.Event{{Type: event.StateEncryption, StateKey: ptr(""),
			Content: event.Content{Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}}}}})
	if err != nil {
		t.Fatalf("create an encrypted room: %v", err)
	}
	e.cfg.Matrix.Rooms = []string{string(resp.RoomID)}
	e.cfg.Matrix.Encryption = true
	return resp.RoomID
}

func ptr[T any](v T) *T { return &v }

// TestEncryptedRoom: with matrix.encryption, an operator's encrypted
// `!mtp steps 10` runs, and everything the bot says in the room (the status
// message, its edits, the thread) is encrypted and reads as in a room
// without encryption. After a restart the same device, with the keys kept in
// the store, reads the next command. A process that does not sync the
// account refuses to post to the encrypted room rather than post in the
// clear.
func TestEncryptedRoom(t *testing.T) {
	// The bot has published its device keys before it syncs.
	e, alice, room, in := encryptedEnv(t, 0)

	cmd := alice.send(t, room, "!mtp steps 10")
	botSaid := func(m msg) bool { return m.Sender == e.botU.ID && m.Room == room }
	root := alice.seen.wait(t, 60*time.Second, "the bot's encrypted answer to "+string(cmd), func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.ReplyTo == cmd && m.RelType == ""
	})
	if root.MsgType != "m.notice" || root.HTML == "" || !strings.Contains(root.Body, "mtp steps 10") {
		t.Fatalf("root status: %+v", root)
	}
	final := alice.seen.wait(t, jobWait, "the final edit", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.RelType == "m.replace" && m.RelTo == root.ID && strings.Contains(m.NewBody, "— succeeded")
	})
	if !strings.HasPrefix(final.NewBody, "✅") {
		t.Errorf("final status: %q", final.NewBody)
	}
	alice.seen.wait(t, 30*time.Second, "the result in the thread", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.RelType == "m.thread" && m.RelTo == root.ID &&
			strings.Contains(m.Body, "Result of") && strings.Contains(m.Body, "tok/s") && strings.Contains(m.Body, "accept")
	})
	// Nothing the bot said in the room went in the clear but its reactions
	// (which the spec leaves unencrypted).
	for _, m := range alice.seen.all(func(m msg) bool { return botSaid(m) && !m.Encrypted }) {
		if m.Type != "m.room.encrypted" && m.Type != "m.reaction" && m.StateKey == "" && m.Member == "" {
			t.Errorf("the bot sent %s in the clear to the encrypted room: %+v", m.Type, m)
		}
	}

	// A second process on the same store, not syncing, must not post there.
	standby, err := matrix.New(*e.cfg.Matrix, matrix.Options{StorePath: e.cfg.Store.Path, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = standby.Post(testCtx(t, 30*time.Second), string(room), bot.Message{Kind: bot.KindNotice, Text: "in the clear?"})
	if err == nil || !strings.Contains(err.Error(), "does not hold the account's keys") {
		t.Errorf("a standby's post to the encrypted room: %v, want it refused", err)
	}

	// Restart: the keys are in the store; the next command is read.
	in.stop()
	in2 := e.start(nil)
	in2.waitReady(t)
	show := alice.send(t, room, "!mtp show")
	sroot := alice.seen.wait(t, 60*time.Second, "the answer to `!mtp show` after a restart", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.ReplyTo == show && m.RelType == ""
	})
	alice.seen.wait(t, jobWait, "`!mtp show` to report steps 10", func(m msg) bool {
		return botSaid(m) && m.RelType == "m.replace" && m.RelTo == sroot.ID && strings.Contains(m.NewBody, "unit NEXTN steps 10")
	})
	devs, err := e.botU.Client.GetDevicesInfo(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs.Devices) != 2 { // the test's own login, and opsbot's one device
		t.Errorf("the bot's account has %d devices after a restart, want 2 (one of opsbot's, kept): %+v", len(devs.Devices), devs.Devices)
	}
	for _, m := range alice.seen.all(func(m msg) bool { return m.Sender == e.botU.ID && strings.Contains(m.Body, "could not read") }) {
		t.Errorf("the bot could not read a command: %q", m.Body)
	}
}

func hasMember(j *mautrix.RespJoinedMembers, u id.UserID) bool {
	_, ok := j.Joined[u]
	return ok
}

// TestEncryptedUnreadable: an encrypted command whose room key never reaches
// the bot is not run; its sender is told so (once, however many such
// messages they send) and how to fix it, and it is audited.
func TestEncryptedUnreadable(t *testing.T) {
	e, alice, room, in := encryptedEnv(t, 1500*time.Millisecond)
	// A Megolm message of a session nobody shared with the bot.
	ctx := testCtx(t, 30*time.Second)
	fake := func() map[string]any {
		sess := make([]byte, 32)
		rand.Read(sess)
		ct := make([]byte, 120)
		rand.Read(ct)
		return map[string]any{"algorithm": id.AlgorithmMegolmV1, "sender_key": alice.mach.OwnIdentity().IdentityKey,
			"device_id": e.alice.Client.DeviceID, "session_id": base64.RawStdEncoding.EncodeToString(sess),
			"ciphertext": base64.RawStdEncoding.EncodeToString(ct)}
	}
	var sent []id.EventID
	for range 2 {
		r, err := e.alice.Client.SendMessageEvent(ctx, room, event.EventEncrypted, fake())
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r.EventID)
	}
	told := alice.seen.wait(t, 60*time.Second, "the bot to say it could not read the message", func(m msg) bool {
		return m.Sender == e.botU.ID && m.Room == room && strings.Contains(m.Body, "could not read your encrypted message")
	})
	if !told.Encrypted || !slices.Contains(sent, told.ReplyTo) || !strings.Contains(told.Body, "no command in it was run") ||
		!strings.Contains(told.Body, "send the command again") {
		t.Errorf("the notice: %+v", told)
	}
	poll(t, 30*time.Second, "both messages audited as undecryptable", func() bool {
		rows, err := in.app.Store.Audit(context.Background(), store.AuditFilter{User: string(e.alice.ID)})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			if r.Decision == "undecryptable" {
				n++
			}
		}
		return n == 2
	})
	// A readable command still works, and only one notice was sent for the two.
	cmd := alice.send(t, room, "!mtp show")
	alice.seen.wait(t, 60*time.Second, "the answer to a readable command", func(m msg) bool {
		return m.Sender == e.botU.ID && m.Encrypted && m.ReplyTo == cmd
	})
	if n := len(alice.seen.all(func(m msg) bool {
		return m.Sender == e.botU.ID && strings.Contains(m.Body, "could not read your encrypted message")
	})); n != 1 {
		t.Errorf("%d notices for two unreadable messages from one sender, want 1", n)
	}
	jobs, err := in.app.Store.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Errorf("jobs: %+v, want only the readable command's", jobs)
	}
}

// TestEncryptedAttachments: in an encrypted room a chart and long output go
// up encrypted (the file's key travels in the encrypted event), and the
// member's client decrypts them to the bytes the bot had.
func TestEncryptedAttachments(t *testing.T) {
	_, alice, room, in := encryptedEnv(t, 0)
	ctx := testCtx(t, 60*time.Second)
	root, err := in.adapter.Post(ctx, string(room), bot.Message{Kind: bot.KindStatus, Text: "⏳ #9 `sweep` — queued"})
	if err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\n not really a chart")
	if _, err := in.adapter.Reply(ctx, root, bot.Message{Kind: bot.KindResult, Text: "sweep done", Image: &bot.Image{Name: "sweep.png", PNG: png}}); err != nil {
		t.Fatal(err)
	}
	img := alice.seen.wait(t, 30*time.Second, "the chart in the thread", func(m msg) bool {
		return m.Encrypted && m.MsgType == "m.image" && m.RelTo == id.EventID(root.ID)
	})
	// Read the event again, decrypted, for its file.
	c := alice.decrypted(t, room, img.ID)
	file, url := c.File, string(c.URL)
	if file == nil || url != "" {
		t.Fatalf("the chart's event: file %+v, url %q: want an encrypted file and no clear url", file, url)
	}
	uri, err := file.URL.Parse()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := alice.u.Client.DownloadBytes(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	if string(sealed) == string(png) {
		t.Fatal("the chart was uploaded in the clear")
	}
	plain := slices.Clone(sealed)
	err = file.DecryptInPlace(plain)
	if err != nil || string(plain) != string(png) {
		t.Fatalf("decrypted chart: %q, %v; want %q", plain, err, png)
	}
}

// decrypted fetches event evid of room and decrypts it.
func (m *e2eeMember) decrypted(t testing.TB, room id.RoomID, evid id.EventID) *event.MessageEventContent {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	evt, err := m.u.Client.GetEvent(ctx, room, evid)
	if err != nil {
		t.Fatal(err)
	}
	evt.RoomID = room
	if err := evt.Content.ParseRaw(event.EventEncrypted); err != nil {
		t.Fatal(err)
	}
	dec, err := m.mach.DecryptMegolmEvent(ctx, evt)
	if err != nil {
		t.Fatal(err)
	}
	return dec.Content.AsMessage()
}

// BenchmarkEncryptedCommandToFirstReply is BenchmarkCommandToFirstReply in
// an encrypted room: the command is decrypted, the answer encrypted (the
// first one shares the bot's room key with the room's devices).
//
//	go test -tags goolm -run XXX -bench EncryptedCommandToFirstReply -benchtime 1x ./bot/matrix/
func BenchmarkEncryptedCommandToFirstReply(b *testing.B) {
	e, alice, room, _ := encryptedEnv(b, 0)
	benchFirstReply(b, e, alice.seen, room, func(text string) id.EventID { return alice.send(b, room, text) })
}
