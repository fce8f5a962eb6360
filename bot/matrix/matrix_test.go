package matrix_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/store"
)

// These tests run against a real Dendrite homeserver (internal/dendritetest)
// and the lab over real SSH; they skip when Dendrite is not built.

const jobWait = 90 * time.Second

// rootOf waits for the bot's root status message answering the command cmd.
func (e *env) rootOf(t testing.TB, cmd id.EventID) msg {
	t.Helper()
	return e.seen.Wait(t, 30*time.Second, "bot message answering "+string(cmd), func(m msg) bool {
		return m.Sender == e.botU.ID && m.Type == "m.room.message" && m.ReplyTo == cmd && m.RelType == ""
	})
}

// finalEdit waits for the edit of root that shows the job ended with state.
func (e *env) finalEdit(t testing.TB, root msg, state string) msg {
	t.Helper()
	return e.seen.Wait(t, jobWait, "an edit of "+string(root.ID)+" to "+state, func(m msg) bool {
		return m.Sender == e.botU.ID && m.RelType == "m.replace" && m.RelTo == root.ID && strings.Contains(m.NewBody, "— "+state)
	})
}

func (e *env) thread(root msg) []msg {
	return e.seen.All(func(m msg) bool {
		return m.Sender == e.botU.ID && m.RelType == "m.thread" && m.RelTo == root.ID
	})
}

// TestMtpStepsInRoom: an operator's `!mtp steps 10` gives a root m.notice
// (HTML and plain body) answering the command, edited in place to success,
// a thread with the steps and the result with tok/s and acceptance, and a ✅
// reaction; `!mtp show` then reports steps 10.
func TestMtpStepsInRoom(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)

	cmd := send(t, e.alice, e.room, "!mtp steps 10")
	root := e.rootOf(t, cmd)
	if root.MsgType != "m.notice" || root.HTML == "" || !strings.Contains(root.Body, "mtp steps 10") {
		t.Fatalf("root status: %+v", root)
	}
	final := e.finalEdit(t, root, "succeeded")
	if !strings.HasPrefix(final.NewBody, "✅") {
		t.Errorf("final status: %q", final.NewBody)
	}
	var steps, result bool
	var text strings.Builder
	e.seen.Wait(t, 30*time.Second, "the result in the thread", func(m msg) bool {
		return m.RelType == "m.thread" && m.RelTo == root.ID && strings.Contains(m.Body, "Result of")
	})
	for _, m := range e.thread(root) {
		text.WriteString(m.Body + "\n")
		if strings.Contains(m.Body, "▶") {
			steps = true
		}
		if strings.Contains(m.Body, "Result of") && strings.Contains(m.Body, "tok/s") && strings.Contains(m.Body, "accept") {
			result = true
			if !strings.Contains(m.HTML, "<strong>Result of") {
				t.Errorf("result HTML not formatted: %q", m.HTML)
			}
		}
	}
	if !steps || !result {
		t.Fatalf("thread: steps %v, result with tok/s and acceptance %v:\n%s", steps, result, text.String())
	}
	e.seen.Wait(t, 30*time.Second, "the outcome reaction", func(m msg) bool {
		return m.Type == "m.reaction" && m.RelTo == root.ID && m.Key == "✅"
	})
	edits := len(e.seen.All(func(m msg) bool { return m.RelType == "m.replace" && m.RelTo == root.ID }))
	t.Logf("figure: %d edits of the status message, %d thread messages for `mtp steps 10`", edits, len(e.thread(root)))

	show := send(t, e.alice, e.room, "!mtp show")
	sroot := e.rootOf(t, show)
	sfinal := e.finalEdit(t, sroot, "succeeded")
	if !strings.Contains(sfinal.NewBody, "unit NEXTN steps 10") {
		t.Errorf("mtp show after steps 10: %q", sfinal.NewBody)
	}
}

// TestRefusedWithoutRole: a member without a role is told which role the
// command needs, and no job runs.
func TestRefusedWithoutRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)
	cmd := send(t, e.bob, e.room, "!mtp steps 10")
	r := e.rootOf(t, cmd)
	if !strings.Contains(r.Body, "needs the operator role") || !strings.Contains(r.Body, "matrix:"+string(e.bob.ID)) {
		t.Fatalf("refusal: %q", r.Body)
	}
	jobs, err := in.app.Store.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.Status != store.Refused {
			t.Errorf("job %d %q is %s: a refused command ran", j.ID, j.Command, j.Status)
		}
	}
	if len(jobs) != 1 {
		t.Errorf("jobs: %+v, want the one refused", jobs)
	}
}

// TestRestartNoReplay: a restarted bot answers no command twice; a command
// sent while it was down is run when it comes back within
// matrix.stale_after, and answered "stale, not run" when it comes back
// later.
func TestRestartNoReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)
	first := send(t, e.alice, e.room, "!help")
	e.rootOf(t, first)
	in.stop()

	down := send(t, e.alice, e.room, "!jobs")
	in = e.start(nil)
	in.waitReady(t)
	e.rootOf(t, down)
	in.stop()

	late := send(t, e.alice, e.room, "!mtp steps 4")
	in = e.start(func() time.Time { return time.Now().Add(6 * time.Minute) })
	in.waitReady(t)
	r := e.rootOf(t, late)
	if !strings.HasPrefix(r.Body, "stale, not run") {
		t.Fatalf("late command: %q", r.Body)
	}
	// A marker answered after everything above: by then any replay would
	// have been answered too.
	marker := send(t, e.alice, e.room, "!help mtp")
	e.rootOf(t, marker)
	for _, c := range []id.EventID{first, down, late} {
		if n := len(e.seen.All(func(m msg) bool { return m.Sender == e.botU.ID && m.ReplyTo == c })); n != 1 {
			t.Errorf("command %s answered %d times, want once", c, n)
		}
	}
	jobs, err := in.app.Store.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if strings.Contains(j.Command, "steps 4") {
			t.Errorf("the stale command ran: job %d %s", j.ID, j.Status)
		}
	}
}

// TestOtherRooms: a command in a room outside matrix.rooms gets no answer
// (the door refuses and audits it); an invite to such a room is declined.
func TestOtherRooms(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)
	send(t, e.alice, e.other, "!mtp steps 10")
	marker := send(t, e.alice, e.room, "!help")
	e.rootOf(t, marker)
	if got := e.seen.All(func(m msg) bool { return m.Sender == e.botU.ID && m.Room == e.other && m.Type == "m.room.message" }); len(got) > 0 {
		t.Fatalf("the bot spoke in a room outside matrix.rooms: %+v", got)
	}
	testkit.WaitFor(t, 10*time.Second, "the ignored command in the audit log", func() bool {
		entries, err := in.app.Store.Audit(context.Background(), store.AuditFilter{User: string(e.alice.ID)})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range entries {
			if a.Decision == store.DecisionRefused && a.Room == string(e.other) && a.Command == "!mtp steps 10" &&
				strings.Contains(a.Detail, "not in matrix.rooms") {
				return true
			}
		}
		return false
	})

	ctx := testkit.Context(t, 30*time.Second)
	third, err := e.alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "public_chat"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.alice.Client.InviteUser(ctx, third.RoomID, &mautrix.ReqInviteUser{UserID: e.botU.ID}); err != nil {
		t.Fatal(err)
	}
	e.seen.Wait(t, 30*time.Second, "the bot declining the invite", func(m msg) bool {
		return m.Room == third.RoomID && m.Type == "m.room.member" && m.StateKey == string(e.botU.ID) && m.Member == "leave"
	})
}

// TestConfirmByReaction: `!svc stop coder` asks for confirmation; alice's ✅
// on the preview runs it; bob's ✅ on it is refused, and as bob has no
// role he is told only that, not who asked or for what.
func TestConfirmByReaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)
	cmd := send(t, e.alice, e.room, "!svc stop coder")
	preview := e.rootOf(t, cmd)
	if !strings.Contains(preview.Body, "React ✅ to confirm") {
		t.Fatalf("preview: %q", preview.Body)
	}
	ctx := testkit.Context(t, 30*time.Second)
	// bob's reaction is refused: the confirmation is alice's.
	bobs, err := e.bob.Client.SendReaction(ctx, e.room, preview.ID, "✅")
	if err != nil {
		t.Fatal(err)
	}
	refusal := e.rootOf(t, bobs.EventID)
	if !strings.Contains(refusal.Body, "you have no role in opsbot here") || strings.Contains(refusal.Body, string(e.alice.ID)) ||
		strings.Contains(refusal.Body, "svc stop") {
		t.Fatalf("bob's confirmation of alice's preview: %q", refusal.Body)
	}
	react, err := e.alice.Client.SendReaction(ctx, e.room, preview.ID, "✅")
	if err != nil {
		t.Fatal(err)
	}
	_ = react
	root := e.seen.Wait(t, 30*time.Second, "the confirmed job's status", func(m msg) bool {
		return m.Sender == e.botU.ID && m.Type == "m.room.message" && m.ReplyTo == cmd && m.RelType == "" && m.ID != preview.ID
	})
	e.finalEdit(t, root, "succeeded")
	if !strings.Contains(root.Body, "svc stop coder") {
		t.Errorf("status of the confirmed job: %q", root.Body)
	}
	_ = in
}

// TestTwoInstancesOneSyncs: two opsbot processes on one store: one syncs,
// the other stands by and says so; when the first stops, the second takes
// the sync over; every command is answered exactly once.
func TestTwoInstancesOneSyncs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.start(nil)
	a.waitReady(t)
	b := e.start(nil)
	testkit.WaitFor(t, 30*time.Second, "the second process to stand by", func() bool {
		err := b.adapter.Ready()
		return err != nil && strings.Contains(err.Error(), "standing by")
	})
	first := send(t, e.alice, e.room, "!help")
	e.rootOf(t, first)
	a.stop()
	b.waitReady(t)
	second := send(t, e.alice, e.room, "!jobs")
	e.rootOf(t, second)
	marker := send(t, e.alice, e.room, "!help svc")
	e.rootOf(t, marker)
	for _, c := range []id.EventID{first, second} {
		if n := len(e.seen.All(func(m msg) bool { return m.Sender == e.botU.ID && m.ReplyTo == c })); n != 1 {
			t.Errorf("command %s answered %d times, want once", c, n)
		}
	}
}

// TestLoginKept: a password login happens once; restarts use the device
// and access token kept in the store (the account gains no device).
func TestLoginKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 3 {
		in := e.start(nil)
		in.waitReady(t)
		in.stop()
	}
	devs, err := e.botU.Client.GetDevicesInfo(testkit.Context(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// One device from the account's registration, one from opsbot's login.
	if len(devs.Devices) != 2 {
		t.Fatalf("the bot's account has %d devices after three starts, want 2: %+v", len(devs.Devices), devs.Devices)
	}
}

// TestAttachmentsAndEncrypted: a chart goes into the thread as an m.image,
// output over 16 KiB as its first lines and an m.file; an encrypted event
// in an allowed room is answered with a notice that the bot cannot read it.
func TestAttachmentsAndEncrypted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)
	ctx := testkit.Context(t, 30*time.Second)
	root, err := in.adapter.Post(ctx, string(e.room), bot.Message{Kind: bot.KindStatus, Text: "⏳ #9 `sweep` — queued"})
	if err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\n not really a chart")
	long := strings.Repeat("a line of the journal\n", 1000)
	if _, err := in.adapter.Reply(ctx, root, bot.Message{Kind: bot.KindResult, Text: long, Image: &bot.Image{Name: "sweep.png", PNG: png}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"m.notice", "m.file", "m.image"} {
		m := e.seen.Wait(t, 30*time.Second, want+" in the thread", func(m msg) bool {
			return m.RelType == "m.thread" && m.RelTo == id.EventID(root.ID) && m.MsgType == want
		})
		if want == "m.notice" && (len(m.Body) > 16<<10 || !strings.Contains(m.Body, "attached")) {
			t.Errorf("the notice before the file: %d bytes: %.200q", len(m.Body), m.Body)
		}
	}

	enc, err := e.alice.Client.SendMessageEvent(ctx, e.room, event.EventEncrypted, map[string]any{
		"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEnAC", "device_id": "X", "sender_key": "k", "session_id": "s"})
	if err != nil {
		t.Fatal(err)
	}
	r := e.rootOf(t, enc.EventID)
	if !strings.Contains(r.Body, "cannot read encrypted messages") {
		t.Errorf("answer to an encrypted event: %q", r.Body)
	}
}

// TestOneOutcomePerMessage: a job's status message got the interruption's
// reaction ⚠️ from the opsbot process that took the job over (a second
// adapter, not syncing, on the same store: another process); the process
// that ran it records its real outcome late and edits the message again.
// The message then shows exactly one outcome reaction of the bot's, the
// late ❌: the homeserver holds the ⚠️ redacted.
func TestOneOutcomePerMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)
	taker, err := matrix.New(*e.cfg.Matrix, matrix.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	taker.Attach(matrix.Deps{State: e.openStore(t)})
	ctx := testkit.Context(t, 60*time.Second)
	root, err := in.adapter.Post(ctx, string(e.room), bot.Message{Kind: bot.KindStatus, Text: "🔄 #12 `mtp steps 8 qwen` — running"})
	if err != nil {
		t.Fatal(err)
	}
	if err := taker.Edit(ctx, root, bot.Message{Kind: bot.KindStatus, Final: true, Text: "⚠️ #12 interrupted", Status: bot.StatusInterrupted}); err != nil {
		t.Fatal(err)
	}
	e.seen.Wait(t, 30*time.Second, "the interruption's reaction", func(m msg) bool {
		return m.Type == "m.reaction" && m.RelTo == id.EventID(root.ID) && m.Key == "⚠️"
	})
	if err := in.adapter.Edit(ctx, root, bot.Message{Kind: bot.KindStatus, Final: true, Text: "❌ #12 failed (recorded late)",
		Status: bot.StatusFailed, Replaces: bot.StatusInterrupted}); err != nil {
		t.Fatal(err)
	}
	e.seen.Wait(t, 30*time.Second, "the late outcome's reaction", func(m msg) bool {
		return m.Type == "m.reaction" && m.RelTo == id.EventID(root.ID) && m.Key == "❌"
	})
	shown := func() []string {
		redacted := map[id.EventID]bool{}
		for _, m := range e.seen.All(func(m msg) bool { return m.Type == "m.room.redaction" }) {
			redacted[m.Redacts] = true
		}
		var keys []string
		for _, m := range e.seen.All(func(m msg) bool {
			return m.Type == "m.reaction" && m.Sender == e.botU.ID && m.RelTo == id.EventID(root.ID)
		}) {
			if !redacted[m.ID] {
				keys = append(keys, m.Key)
			}
		}
		return keys
	}
	if !testkit.Poll(30*time.Second, func() bool { return strings.Join(shown(), " ") == "❌" }) {
		t.Fatalf("the bot's reactions on the status message: %q; want only ❌\n%s", shown(), e.seen.Dump())
	}
}

// TestBadCredentials: a wrong password, or another account's access token,
// makes Run return an error that says so, without retrying for ever.
func TestBadCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		name string
		edit func(m *config.Matrix)
		want string
	}{
		{"wrong password", func(m *config.Matrix) { m.Password = "wrong" }, "log in as " + string(e.botU.ID)},
		{"alice's token", func(m *config.Matrix) { m.Password, m.AccessToken = "", config.Secret(e.alice.Client.AccessToken) },
			"belongs to " + string(e.alice.ID)},
	} {
		m := *e.cfg.Matrix
		c.edit(&m)
		a, err := matrix.New(m, matrix.Options{Logger: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		st := e.openStore(t)
		locker, err := leases.New(testkit.Context(t, 10*time.Second), st, leases.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(locker.Close)
		a.Attach(matrix.Deps{State: st, Locker: locker, Keys: st})
		err = a.Run(testkit.Context(t, 30*time.Second), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Run: %v, want it to say %q", c.name, err, c.want)
		}
		if r := a.Ready(); r == nil {
			t.Errorf("%s: ready after a refused login", c.name)
		}
	}
}

// TestCancelJob: `!cancel N` from the operator who started job N stops it;
// its status message ends cancelled with the 🚫 reaction.
func TestCancelJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil)
	in.waitReady(t)
	cmd := send(t, e.alice, e.room, "!mtp steps 6")
	root := e.rootOf(t, cmd)
	jobs, err := in.app.Store.ListJobs(context.Background(), store.JobFilter{Active: true})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("active jobs: %+v %v", jobs, err)
	}
	send(t, e.alice, e.room, "!cancel "+strconv.FormatInt(jobs[0].ID, 10))
	e.finalEdit(t, root, "cancelled")
	e.seen.Wait(t, 30*time.Second, "the cancelled reaction", func(m msg) bool {
		return m.Type == "m.reaction" && m.RelTo == root.ID && m.Key == "🚫"
	})
}

// TestInterruptedJobReported: a job that a stopped opsbot left running is
// reported interrupted in its thread when the bot starts again, before the
// adapter's sync runs (the kept login serves the bot's first messages).
func TestInterruptedJobReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in := e.start(nil) // logs in once: the login is kept
	in.waitReady(t)
	in.stop()
	root := send(t, e.alice, e.room, "(the status message of a job whose process died)")
	ctx := testkit.Context(t, 30*time.Second)
	st, err := store.Open(ctx, e.cfg.Store.Path)
	if err != nil {
		t.Fatal(err)
	}
	// No owner registered on this handle: the job counts as a dead process's.
	j, err := st.CreateJob(ctx, store.Job{Command: "mtp steps 10 qwen", Platform: matrix.Platform, User: string(e.alice.ID),
		Room: string(e.room), Thread: string(root), Service: "qwen", Status: store.Running})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	e.start(nil)
	m := e.seen.Wait(t, 30*time.Second, "the interrupted notice in the job's thread", func(m msg) bool {
		return m.Sender == e.botU.ID && m.RelType == "m.thread" && m.RelTo == root
	})
	if want := "#" + strconv.FormatInt(j.ID, 10) + " `mtp steps 10 qwen` was interrupted"; !strings.Contains(m.Body, want) {
		t.Errorf("notice %q, want it to say %q", m.Body, want)
	}
}
