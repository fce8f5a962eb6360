//go:build goolm

package matrix_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/internal/dendritetest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// encryptedEnv is an env whose only allowed room is encrypted, with alice's
// client encrypting, and the bot started and joined there.
func encryptedEnv(t testing.TB, keyWait time.Duration) (*env, *dendritetest.E2EEMember, id.RoomID, *instance) {
	t.Helper()
	e := newEnv(t)
	e.keyWait = keyWait
	// A device of alice's own: newEnv's watcher syncs e.alice's, and a
	// device's to-device messages (the room keys) go to whichever of its
	// syncs asks first.
	alice := dendritetest.NewE2EEMember(t, e.hs.Login(t, e.alice))
	room := e.encryptedRoom(t)
	in := e.start(nil)
	testkit.WaitFor(t, 30*time.Second, "the adapter to sync", func() bool { return in.adapter.Ready() == nil })
	testkit.WaitFor(t, 30*time.Second, "the bot to join the encrypted room", func() bool {
		j, err := e.alice.Client.JoinedMembers(testkit.Context(t, 10*time.Second), room)
		return err == nil && hasMember(j, e.botU.ID)
	})
	return e, alice, room, in
}

// encryptedRoom makes an encrypted room of alice's with the bot and bob
// invited, and makes it the only room in matrix.rooms, with encryption on.
func (e *env) encryptedRoom(t testing.TB) id.RoomID {
	t.Helper()
	room := dendritetest.CreateEncryptedRoom(t, e.alice, e.botU.ID, e.bob.ID)
	e.cfg.Matrix.Rooms = []string{string(room)}
	e.cfg.Matrix.Encryption = true
	return room
}

// TestEncryptedRoom: with matrix.encryption, an operator's encrypted
// `!mtp steps 10` runs, and everything the bot says in the room (the status
// message, its edits, the thread) is encrypted and reads as in a room
// without encryption. A new device of a member gets the bot's room key when
// it asks. After a restart the same device, with the keys kept in the store,
// reads the next command. A process that does not sync the
// account refuses to post to the encrypted room rather than post in the
// clear.
func TestEncryptedRoom(t *testing.T) {
	t.Parallel()
	// The bot has published its device keys before it syncs.
	e, alice, room, in := encryptedEnv(t, 0)

	cmd := alice.Send(t, room, "!mtp steps 10")
	botSaid := func(m msg) bool { return m.Sender == e.botU.ID && m.Room == room }
	root := alice.Seen.Wait(t, 60*time.Second, "the bot's encrypted answer to "+string(cmd), func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.ReplyTo == cmd && m.RelType == ""
	})
	if root.MsgType != "m.notice" || root.HTML == "" || !strings.Contains(root.Body, "mtp steps 10") {
		t.Fatalf("root status: %+v", root)
	}
	final := alice.Seen.Wait(t, jobWait, "the final edit", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.RelType == "m.replace" && m.RelTo == root.ID && strings.Contains(m.NewBody, "— succeeded")
	})
	if !strings.HasPrefix(final.NewBody, "✅") {
		t.Errorf("final status: %q", final.NewBody)
	}
	alice.Seen.Wait(t, 30*time.Second, "the result in the thread", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.RelType == "m.thread" && m.RelTo == root.ID &&
			strings.Contains(m.Body, "Result of") && strings.Contains(m.Body, "tok/s") && strings.Contains(m.Body, "accept")
	})
	// Nothing the bot said in the room went in the clear but its reactions
	// (which the spec leaves unencrypted).
	for _, m := range alice.Seen.All(func(m msg) bool { return botSaid(m) && !m.Encrypted }) {
		if m.Type != "m.room.encrypted" && m.Type != "m.reaction" && m.StateKey == "" && m.Member == "" {
			t.Errorf("the bot sent %s in the clear to the encrypted room: %+v", m.Type, m)
		}
	}

	// Alice opens a second client, a new device, after the bot shared its
	// room key: that client asks for the key of the bot's messages it cannot
	// read, and gets it (she is a member; the room's history is shared).
	alice2 := dendritetest.NewE2EEMember(t, e.hs.Login(t, e.alice))
	alice2.Seen.Wait(t, 60*time.Second, "alice's new device to read the bot's final edit", func(m msg) bool {
		return m.ID == final.ID && m.Encrypted
	})

	// A second process on the same store, not syncing, must not post there.
	standby, err := matrix.New(*e.cfg.Matrix, matrix.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// It reads the kept login from the store, as a standby's bot does.
	standby.Attach(matrix.Deps{State: e.openStore(t)})
	_, err = standby.Post(testkit.Context(t, 30*time.Second), string(room), bot.Message{Kind: bot.KindNotice, Text: "in the clear?"})
	if err == nil || !strings.Contains(err.Error(), "does not hold the account's keys") {
		t.Errorf("a standby's post to the encrypted room: %v, want it refused", err)
	}

	// Restart: the keys are in the store; the next command is read.
	in.stop()
	in2 := e.start(nil)
	in2.waitReady(t)
	show := alice.Send(t, room, "!mtp show")
	sroot := alice.Seen.Wait(t, 60*time.Second, "the answer to `!mtp show` after a restart", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.ReplyTo == show && m.RelType == ""
	})
	alice.Seen.Wait(t, jobWait, "`!mtp show` to report steps 10", func(m msg) bool {
		return botSaid(m) && m.RelType == "m.replace" && m.RelTo == sroot.ID && strings.Contains(m.NewBody, "unit NEXTN steps 10")
	})
	devs, err := e.botU.Client.GetDevicesInfo(testkit.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs.Devices) != 2 { // the test's own login, and opsbot's one device
		t.Errorf("the bot's account has %d devices after a restart, want 2 (one of opsbot's, kept): %+v", len(devs.Devices), devs.Devices)
	}
	for _, m := range alice.Seen.All(func(m msg) bool { return m.Sender == e.botU.ID && strings.Contains(m.Body, "could not read") }) {
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
	t.Parallel()
	e, alice, room, in := encryptedEnv(t, 1500*time.Millisecond)
	// A Megolm message of a session nobody shared with the bot.
	ctx := testkit.Context(t, 30*time.Second)
	fake := func() map[string]any {
		sess := make([]byte, 32)
		rand.Read(sess)
		ct := make([]byte, 120)
		rand.Read(ct)
		return map[string]any{"algorithm": id.AlgorithmMegolmV1, "sender_key": alice.Mach.OwnIdentity().IdentityKey,
			"device_id": alice.User.Client.DeviceID, "session_id": base64.RawStdEncoding.EncodeToString(sess),
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
	told := alice.Seen.Wait(t, 60*time.Second, "the bot to say it could not read the message", func(m msg) bool {
		return m.Sender == e.botU.ID && m.Room == room && strings.Contains(m.Body, "could not read your encrypted message")
	})
	if !told.Encrypted || !slices.Contains(sent, told.ReplyTo) || !strings.Contains(told.Body, "no command in it was run") ||
		!strings.Contains(told.Body, "send the command again") {
		t.Errorf("the notice: %+v", told)
	}
	testkit.WaitFor(t, 30*time.Second, "both messages audited as undecryptable", func() bool {
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
	cmd := alice.Send(t, room, "!mtp show")
	alice.Seen.Wait(t, 60*time.Second, "the answer to a readable command", func(m msg) bool {
		return m.Sender == e.botU.ID && m.Encrypted && m.ReplyTo == cmd
	})
	if n := len(alice.Seen.All(func(m msg) bool {
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
	t.Parallel()
	_, alice, room, in := encryptedEnv(t, 0)
	ctx := testkit.Context(t, 60*time.Second)
	root, err := in.adapter.Post(ctx, string(room), bot.Message{Kind: bot.KindStatus, Text: "⏳ #9 `sweep` — queued"})
	if err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\n not really a chart")
	if _, err := in.adapter.Reply(ctx, root, bot.Message{Kind: bot.KindResult, Text: "sweep done", Image: &bot.Image{Name: "sweep.png", PNG: png}}); err != nil {
		t.Fatal(err)
	}
	img := alice.Seen.Wait(t, 30*time.Second, "the chart in the thread", func(m msg) bool {
		return m.Encrypted && m.MsgType == "m.image" && m.RelTo == id.EventID(root.ID)
	})
	// Read the event again, decrypted, for its file.
	c := alice.Decrypted(t, room, img.ID)
	file, url := c.File, string(c.URL)
	if file == nil || url != "" {
		t.Fatalf("the chart's event: file %+v, url %q: want an encrypted file and no clear url", file, url)
	}
	uri, err := file.URL.Parse()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := alice.User.Client.DownloadBytes(ctx, uri)
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

// BenchmarkEncryptedCommandToFirstReply is BenchmarkCommandToFirstReply in
// an encrypted room: the command is decrypted, the answer encrypted (the
// first one shares the bot's room key with the room's devices).
//
//	go test -tags goolm -run XXX -bench EncryptedCommandToFirstReply -benchtime 1x ./bot/matrix/
func BenchmarkEncryptedCommandToFirstReply(b *testing.B) {
	e, alice, room, _ := encryptedEnv(b, 0)
	benchFirstReply(b, e, alice.Seen, room, func(text string) id.EventID { return alice.Send(b, room, text) })
}
