package bot

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// secondProcess is another opsbot process on h's store file: its own store
// handle, engine and dispatcher, with the same roles and admissions.
func (h *harness) secondProcess(t *testing.T) (*Dispatcher, *jobs.Engine, *chatrec.Recorder) {
	t.Helper()
	st, err := store.Open(context.Background(), h.store.Path())
	if err != nil {
		t.Fatal(err)
	}
	chat := chatrec.New()
	eng := jobs.NewEngine(jobs.EngineOptions{Store: st, Backend: jobtest.OK(), Chats: map[string]Chat{"test": chat}, JobTimeout: time.Minute})
	d := NewDispatcher(DispatcherOptions{Store: st, Engine: eng, Auth: h.disp.opts.Auth, Commands: h.disp.commands(), ConfirmTTL: time.Minute})
	if m := h.disp.admissions.Load(); m != nil {
		d.SetAdmissions(*m)
	}
	t.Cleanup(func() {
		eng.Close()
		st.Close()
	})
	return d, eng, chat
}

func auditOf(t *testing.T, st *store.Store, decision string) []store.AuditEntry {
	t.Helper()
	all, err := st.Audit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AuditEntry
	for _, a := range all {
		if a.Decision == decision {
			out = append(out, a)
		}
	}
	return out
}

// TestReplayRunsOnceAcrossProcesses: a delivery is claimed in the store, so
// the same delivery again, to this process or to another on the store,
// runs nothing; the first replay is audited, later ones only counted.
func TestReplayRunsOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	req := Request{Platform: "test", User: "olga", Room: "ops", Text: "mtp steps 4 qwen", Delivery: "http:abc"}
	r := h.disp.Handle(ctx, req)
	if r.Outcome != Queued {
		t.Fatalf("first delivery: %s %q", r.Outcome, r.Text)
	}
	h.wait(r.JobID)
	other, _, _ := h.secondProcess(t)
	for i, d := range []*Dispatcher{h.disp, other, other, h.disp} {
		if r := d.Handle(ctx, req); r.Outcome != Duplicate {
			t.Fatalf("replay %d: %s %q, want duplicate", i+1, r.Outcome, r.Text)
		}
	}
	jobs, err := h.store.ListJobs(ctx, store.JobFilter{})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs %+v (%v); want the first only", jobs, err)
	}
	if got := auditOf(t, h.store, DecisionReplayed); len(got) != 1 || !strings.Contains(got[0].Detail, "http:abc") {
		t.Fatalf("replay audit rows: %+v; want one, naming the delivery", got)
	}
	// A request without a delivery key (a terminal) is never a duplicate.
	if r := h.handle("olga", "help"); r.Outcome != Answered {
		t.Fatalf("help: %s", r.Outcome)
	}
	if r := h.handle("olga", "help"); r.Outcome != Answered {
		t.Fatalf("help again: %s", r.Outcome)
	}
}

// TestAdmissionIsTheDoors: rooms off the allowlist, DMs where they are off
// and stale commands are refused the same way for every platform, each with
// an audit row and a Refusal the adapter can show its own way; nothing is
// parsed or run. A platform without admission rules is not restricted.
func TestAdmissionIsTheDoors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), map[string]string{"slack:olga": "operator", "matrix:olga": "operator", "test:olga": "operator"})
	h.disp.SetAdmissions(map[string]Admission{
		"slack":  {Rooms: []string{"C1"}, RoomNames: []string{"<#C1>"}, RoomsKey: "slack.channels", RoomWord: "channel", DMKey: "slack.allow_dms"},
		"matrix": {Rooms: []string{"!ops:hs"}, RoomsKey: "matrix.rooms", StaleAfter: 5 * time.Minute},
	})
	ctx := context.Background()
	now := time.Now()
	cases := []struct {
		name    string
		req     Request
		refusal Refusal
		says    string
	}{
		{"slack channel off the list", Request{Platform: "slack", User: "olga", Room: "C9", Text: "mtp steps 4 qwen", Delivery: "d1"},
			RefusedRoom, "no commands in this channel: run it in <#C1>"},
		{"slack DM while DMs are off", Request{Platform: "slack", User: "olga", Room: "D1", DM: true, Text: "mtp steps 4 qwen", Delivery: "d2"},
			RefusedDM, "slack.allow_dms is off"},
		{"matrix room off the list", Request{Platform: "matrix", User: "olga", Room: "!x:hs", Text: "!mtp steps 4 qwen", Delivery: "$e1"},
			RefusedRoom, "matrix.rooms"},
		{"matrix command sent 6 minutes ago", Request{Platform: "matrix", User: "olga", Room: "!ops:hs", Text: "!mtp steps 4 qwen",
			Delivery: "$e2", SentAt: now.Add(-6 * time.Minute)}, RefusedStale, "stale, not run"},
	}
	for _, c := range cases {
		r := h.disp.Handle(ctx, c.req)
		if r.Outcome != Refused || r.Refusal != c.refusal || !strings.Contains(r.Text, c.says) {
			t.Errorf("%s: %s/%s %q; want refused/%s saying %q", c.name, r.Outcome, r.Refusal, r.Text, c.refusal, c.says)
		}
	}
	refused := auditOf(t, h.store, store.DecisionRefused)
	stale := auditOf(t, h.store, DecisionStale)
	if len(refused) != 3 || len(stale) != 1 {
		t.Errorf("audit: %d refusals and %d stale rows, want 3 and 1: %+v %+v", len(refused), len(stale), refused, stale)
	}
	if jobs, _ := h.store.ListJobs(ctx, store.JobFilter{}); len(jobs) != 0 {
		t.Errorf("jobs %+v; the door ran something", jobs)
	}
	for _, req := range []Request{
		{Platform: "slack", User: "olga", Room: "C1", Text: "mtp steps 4 qwen", Delivery: "d3"},
		{Platform: "matrix", User: "olga", Room: "!ops:hs", Text: "!mtp steps 4 llama", Delivery: "$e3", SentAt: now.Add(-time.Minute)},
		{Platform: "test", User: "olga", Room: "anywhere", Text: "help"},
	} {
		if r := h.disp.Handle(ctx, req); r.Outcome != Queued && r.Outcome != Answered {
			t.Errorf("%s in %s: %s %q; want it admitted", req.Platform, req.Room, r.Outcome, r.Text)
		}
	}
}

// TestUnreadableAndInvitesAtTheDoor: what an adapter could not read (an
// encrypted message) and an invitation of the bot go through the door like
// commands: claimed (a replay is a duplicate), refused and audited in a
// room off the list, whatever their age; an unreadable one admitted is
// audited undecryptable and refused RefusedUnreadable, an admitted invite
// is answered (join). Nothing is parsed or run.
func TestUnreadableAndInvitesAtTheDoor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), map[string]string{"matrix:@alice:hs": "operator"})
	h.disp.SetAdmissions(map[string]Admission{"matrix": {Rooms: []string{"!ops:hs"}, RoomsKey: "matrix.rooms", StaleAfter: 5 * time.Minute}})
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	unreadable := func(room, delivery string) Request {
		return Request{Platform: "matrix", User: "@alice:hs", Room: room, Text: "(encrypted)", Delivery: delivery, SentAt: old,
			Unreadable: "the room key has not reached opsbot's device"}
	}
	if r := h.disp.Handle(ctx, unreadable("!ops:hs", "$u1")); r.Outcome != Refused || r.Refusal != RefusedUnreadable {
		t.Errorf("unreadable in the room: %s/%s %q", r.Outcome, r.Refusal, r.Text)
	}
	if r := h.disp.Handle(ctx, unreadable("!ops:hs", "$u1")); r.Outcome != Duplicate {
		t.Errorf("unreadable again: %s %q, want a duplicate", r.Outcome, r.Text)
	}
	if r := h.disp.Handle(ctx, unreadable("!x:hs", "$u2")); r.Outcome != Refused || r.Refusal != RefusedRoom {
		t.Errorf("unreadable off the list: %s/%s %q", r.Outcome, r.Refusal, r.Text)
	}
	invite := func(room string) Request {
		return Request{Platform: "matrix", User: "@opsbot:hs", Room: room, Text: "(invite)", Invite: true}
	}
	if r := h.disp.Handle(ctx, invite("!ops:hs")); r.Outcome != Answered {
		t.Errorf("invite to the room: %s %q, want it accepted", r.Outcome, r.Text)
	}
	if r := h.disp.Handle(ctx, invite("!x:hs")); r.Outcome != Refused || r.Refusal != RefusedRoom {
		t.Errorf("invite off the list: %s/%s %q", r.Outcome, r.Refusal, r.Text)
	}
	if u := auditOf(t, h.store, DecisionUndecryptable); len(u) != 1 || u[0].Room != "!ops:hs" || u[0].Command != "(encrypted)" ||
		u[0].Detail != "the room key has not reached opsbot's device" {
		t.Errorf("undecryptable rows %+v", u)
	}
	if r := auditOf(t, h.store, store.DecisionRefused); len(r) != 1 || r[0].Room != "!x:hs" || r[0].Command != "(encrypted)" {
		t.Errorf("refused rows %+v", r)
	}
	if i := auditOf(t, h.store, DecisionIgnored); len(i) != 1 || i[0].Room != "!x:hs" || i[0].Command != "(invite)" ||
		i[0].User != "@opsbot:hs" || i[0].Detail != "invite declined: the room is not in matrix.rooms" {
		t.Errorf("ignored rows %+v", i)
	}
	if jobs, _ := h.store.ListJobs(ctx, store.JobFilter{}); len(jobs) != 0 {
		t.Errorf("jobs %+v; the door ran something", jobs)
	}
}

// panicking is a auth.Membership that panics: a bug below the door.
type panicking struct{}

func (panicking) GroupsOf(string) []string { panic("groups exploded") }

// TestPanicInHandleIsAnswered: a panic while a request or an action is
// handled is recovered and answered InternalError, nothing was recorded, and
// the dispatcher goes on serving.
func TestPanicInHandleIsAnswered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	good := h.disp.opts.Auth
	h.disp.opts.Auth = good.WithMembership("test", panicking{})
	ctx := context.Background()
	r := h.handle("mallory", "mtp steps 4 qwen") // no role of her own: her groups are asked
	if r.Outcome != InternalError || !strings.Contains(r.Text, "nothing was changed") {
		t.Fatalf("a panicking request: %s %q", r.Outcome, r.Text)
	}
	a := h.disp.Act(ctx, ActionRequest{ID: "cancel:1", Platform: "test", User: "olga", Room: "ops"})
	if a.Outcome != InternalError && a.Outcome != Invalid {
		t.Fatalf("an action after a panic: %s %q", a.Outcome, a.Text)
	}
	if jobs, _ := h.store.ListJobs(ctx, store.JobFilter{}); len(jobs) != 0 {
		t.Fatalf("jobs %+v after a panic", jobs)
	}
	h.disp.opts.Auth = good
	if r := h.handle("olga", "mtp steps 4 qwen"); r.Outcome != Queued {
		t.Fatalf("after the panic: %s %q", r.Outcome, r.Text)
	}
}

// TestConfirmationsLiveInTheStore: a confirmation asked in one process is
// settled in another (a restart, a click that reached the other instance),
// once; a reaction settles the confirmation its message shows; a reaction
// to a message that asks nothing is ignored.
func TestConfirmationsLiveInTheStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	ask := h.handle("olga", "svc stop qwen")
	if ask.Outcome != NeedsConfirm || ask.Token == "" {
		t.Fatalf("svc stop: %s %q", ask.Outcome, ask.Text)
	}
	confirm, _ := ask.Action(ActConfirm)
	other, otherEng, _ := h.secondProcess(t)
	r := other.Act(ctx, ActionRequest{ID: confirm.ID, Platform: "test", User: "olga", Room: "ops"})
	if r.Outcome != Queued {
		t.Fatalf("confirmed in the other process: %s %q", r.Outcome, r.Text)
	}
	if _, err := otherEng.Wait(ctx, r.JobID); err != nil {
		t.Fatal(err)
	}
	if again := h.disp.Act(ctx, ActionRequest{ID: confirm.ID, Platform: "test", User: "olga", Room: "ops"}); again.Outcome != Invalid {
		t.Fatalf("the same confirmation again: %s %q", again.Outcome, again.Text)
	}

	ask = h.handle("olga", "svc stop llama")
	if err := h.disp.Previewed(ctx, ask.Token, "$preview"); err != nil {
		t.Fatal(err)
	}
	if r := other.Act(ctx, ActionRequest{ID: string(ActConfirm), Platform: "test", User: "olga", Room: "ops", Message: "$unrelated"}); r.Outcome != Ignored {
		t.Fatalf("a reaction to a message that asks nothing: %s %q", r.Outcome, r.Text)
	}
	r = other.Act(ctx, ActionRequest{ID: string(ActConfirm), Platform: "test", User: "olga", Room: "ops", Message: "$preview"})
	if r.Outcome != Queued || !strings.Contains(r.Text, "svc stop llama") {
		t.Fatalf("a reaction to the preview: %s %q", r.Outcome, r.Text)
	}
	if _, err := otherEng.Wait(ctx, r.JobID); err != nil {
		t.Fatal(err)
	}
}

// `y` and `yes` confirm the one confirmation waiting in the room for the one
// who types them (not someone else's); with none they say so, with several
// they confirm none and list each with the `confirm TOKEN` that confirms it.
func TestYesConfirmsTheOnePending(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	jobs := func() int {
		n, err := h.store.CountJobs(ctx, store.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if r := h.handle("olga", "y"); r.Outcome != Invalid || !strings.Contains(r.Text, "none waits here") {
		t.Fatalf("y with nothing to confirm: %s %q", r.Outcome, r.Text)
	}
	if r := h.handle("alice", "svc stop llama"); r.Outcome != NeedsConfirm {
		t.Fatalf("alice's svc stop: %s %q", r.Outcome, r.Text)
	}
	if r := h.handle("olga", "svc stop qwen"); r.Outcome != NeedsConfirm {
		t.Fatalf("olga's svc stop: %s %q", r.Outcome, r.Text)
	}
	r := h.handle("olga", "YES")
	if r.Outcome != Queued || r.Command == nil || commands.Text(r.Command) != "svc stop qwen" {
		t.Fatalf("olga's yes: %s %q, want her svc stop qwen queued", r.Outcome, r.Text)
	}
	if j := h.wait(r.JobID); j.User != "olga" || j.Status != store.Succeeded {
		t.Fatalf("job %+v", j)
	}
	if r := h.handle("olga", "y"); r.Outcome != Invalid {
		t.Fatalf("y once more: %s %q, want nothing left to confirm", r.Outcome, r.Text)
	}

	a := h.handle("olga", "svc stop qwen")
	b := h.handle("olga", "svc stop llama")
	before := jobs()
	r = h.handle("olga", "/y")
	if r.Outcome != Answered || jobs() != before {
		t.Fatalf("y with two waiting: %s %q, jobs %d -> %d; want an answer that starts nothing", r.Outcome, r.Text, before, jobs())
	}
	for _, want := range []string{"2 commands wait", "`confirm " + a.Token + "` runs `svc stop qwen`", "`confirm " + b.Token + "` runs `svc stop llama`"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("the list lacks %q:\n%s", want, r.Text)
		}
	}
	if r := h.handle("olga", "confirm "+b.Token); r.Outcome != Queued {
		t.Fatalf("confirm as listed: %s %q", r.Outcome, r.Text)
	} else {
		h.wait(r.JobID)
	}
	later := time.Now().Add(time.Hour)
	h.now.Store(&later)
	if r := h.handle("olga", "yes"); r.Outcome != Invalid {
		t.Fatalf("yes after the confirmation expired: %s %q", r.Outcome, r.Text)
	}
	if _, err := h.disp.Parse("yes"); err == nil {
		t.Error("Parse takes yes as a command")
	}
}

// TestRefusalSaysNothingToWhoMayNotKnow: someone with no role who clicks
// another's Confirm is told only that they have no role; someone with a
// role is told whose it is; neither changes it, and its owner still may.
func TestRefusalSaysNothingToWhoMayNotKnow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	ask := h.handle("olga", "svc stop qwen")
	confirm, _ := ask.Action(ActConfirm)
	r := h.disp.Act(ctx, ActionRequest{ID: confirm.ID, Platform: "test", User: "mallory", Room: "ops"})
	if r.Outcome != Refused || !strings.Contains(r.Text, "no role") || strings.Contains(r.Text, "olga") || strings.Contains(r.Text, "svc stop") {
		t.Fatalf("no role: %s %q; want only that they have no role", r.Outcome, r.Text)
	}
	r = h.disp.Act(ctx, ActionRequest{ID: confirm.ID, Platform: "test", User: "vic", Room: "ops"})
	if r.Outcome != Refused || !strings.Contains(r.Text, "only olga, who asked for `svc stop qwen`") {
		t.Fatalf("a viewer: %s %q", r.Outcome, r.Text)
	}
	if r := h.disp.Act(ctx, ActionRequest{ID: confirm.ID, Platform: "test", User: "olga", Room: "ops"}); r.Outcome != Queued {
		t.Fatalf("the owner after the refusals: %s %q", r.Outcome, r.Text)
	}
}

// TestFinalEditFromTheStoreOnce: a job a dead process left running is
// recorded interrupted at the next start; its status message is edited to
// that final state (with what to check next) from the store, exactly once
// although two processes look for it at the same time.
func TestFinalEditFromTheStoreOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "opsbot.db")
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.CreateJob(ctx, store.Job{Command: "mtp steps 7 qwen", Platform: "test", User: "olga", Room: "ops", Service: "qwen", Host: "gpu1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.StartJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.SetJobThread(ctx, j.ID, "root-1"); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var engines []*jobs.Engine
	var chats []*chatrec.Recorder
	for range 2 {
		s, err := store.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		c := chatrec.New()
		e := jobs.NewEngine(jobs.EngineOptions{Store: s, Backend: jobtest.OK(), Chats: map[string]Chat{"test": c}})
		t.Cleanup(func() {
			e.Close()
			s.Close()
		})
		engines, chats = append(engines, e), append(chats, c)
	}
	if _, err := engines[0].RecoverInterrupted(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.ShowFinals(ctx)
		}()
	}
	wg.Wait()
	var finals []Message
	for _, c := range chats {
		edits, _ := c.Thread("root-1")
		finals = append(finals, edits...)
	}
	if len(finals) != 1 {
		t.Fatalf("%d final edits of the root, want 1: %+v", len(finals), finals)
	}
	m := finals[0]
	if !m.Final || m.Status != StatusInterrupted || !strings.Contains(m.Text, "#1 `mtp steps 7 qwen` — interrupted") ||
		!strings.Contains(m.Text, "`svc status qwen`") {
		t.Fatalf("final edit %+v", m)
	}
	for _, e := range engines {
		e.ShowFinals(ctx)
	}
	if edits, _ := chats[0].Thread("root-1"); len(edits)+len(finals)-1 > 1 {
		t.Fatal("the final edit was made again")
	}
}

// TestLateOutcomeReplacesInterrupted: the process that ran a job records its
// real outcome after another marked the job interrupted (it had lost its
// lease); the status message is edited again to that outcome, marked late.
func TestLateOutcomeReplacesInterrupted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	j, err := h.store.CreateJob(ctx, store.Job{Command: "mtp steps 8 qwen", Platform: "test", User: "olga", Room: "ops", Service: "qwen"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.SetJobThread(ctx, j.ID, "root-9"); err != nil {
		t.Fatal(err)
	}
	if err := h.store.FinishJob(ctx, j.ID, store.Interrupted, store.InterruptedMessage, nil); err != nil {
		t.Fatal(err)
	}
	h.eng.ShowFinals(ctx)
	if err := h.store.FinishJobLate(ctx, j.ID, store.Succeeded, "", []byte(`{"summary":"steps 3 -> 8, 836.8 tok/s"}`)); err != nil {
		t.Fatal(err)
	}
	h.eng.ShowFinals(ctx)
	edits, _ := h.chat.Thread("root-9")
	if len(edits) != 2 || edits[0].Status != StatusInterrupted || edits[1].Status != StatusSucceeded ||
		!strings.Contains(edits[1].Text, "836.8 tok/s") || !strings.Contains(edits[1].Text, "recorded late") {
		t.Fatalf("edits %+v; want interrupted, then the late success", edits)
	}
	// One outcome per message: the late edit takes the interruption's
	// reaction away (the adapters' tests check that they do).
	if edits[0].Replaces != "" || edits[1].Replaces != StatusInterrupted {
		t.Errorf("the edits replace %q, then %q; want nothing, then interrupted", edits[0].Replaces, edits[1].Replaces)
	}
}

// TestFinalEditShowsTheStateAsClaimed: a process read a job interrupted
// (UnshownFinals), then the process that ran it recorded its real outcome
// late, then the first claimed the final edit: the edit shows the late
// outcome the store holds at the claim, not the interruption read before
// (which, with the claim taken, no later edit would correct).
func TestFinalEditShowsTheStateAsClaimed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	j, err := h.store.CreateJob(ctx, store.Job{Command: "mtp steps 8 qwen", Platform: "test", User: "olga", Room: "ops", Service: "qwen"})
	if err == nil {
		err = h.store.SetJobThread(ctx, j.ID, "root-7")
	}
	if err == nil {
		err = h.store.FinishJob(ctx, j.ID, store.Interrupted, store.InterruptedMessage, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	read, err := h.store.UnshownFinals(ctx, []string{"test"}, 10)
	if err != nil || len(read) != 1 || read[0].Status != store.Interrupted {
		t.Fatalf("unshown finals %+v %v", read, err)
	}
	if err := h.store.FinishJobLate(ctx, j.ID, store.Failed, "verify: 2 of 8 requests failed", nil); err != nil {
		t.Fatal(err)
	}
	if !h.eng.ShowFinal(ctx, read[0], "") {
		t.Fatal("the final edit was not made")
	}
	h.eng.ShowFinals(ctx)
	edits, _ := h.chat.Thread("root-7")
	if len(edits) == 0 || edits[len(edits)-1].Status != StatusFailed || edits[len(edits)-1].Replaces != StatusInterrupted {
		t.Fatalf("edits %+v; want the last to show the late failure, replacing the interruption", edits)
	}
}

// fillStore makes st refuse writes as a full disk does: no new page, and
// the events' pages full to the last byte.
func fillStore(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	filler, err := st.CreateJob(ctx, store.Job{Command: "filler", Platform: "test", User: "u", Room: "r", Status: store.Refused})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.LimitSize(ctx, 0); err != nil {
		t.Fatal(err)
	}
	i := 0
	for _, size := range []int{64 << 10, 4 << 10, 256, 16, 1} { // until even small rows do not fit
		for ; ; i++ {
			err := st.AppendEvent(ctx, store.Event{JobID: filler.ID, At: time.Now(), Step: "fill", Status: "done",
				Message: strings.Repeat("x", size)})
			if store.IsRefusingWrites(err) {
				break
			}
			if err != nil || i > 5000 {
				t.Fatalf("filling the store: %v", err)
			}
		}
	}
}

// TestStoreRefusingWritesMidJob: the store fills up while a job runs. The
// thread says at once that the store cannot record; the job is asked to
// wind down (the pipeline sees it); what it could not record is kept and,
// once the store takes writes again, recorded: every event, the job failed
// naming the store and how it ended, and its status message edited to that.
func TestStoreRefusingWritesMidJob(t *testing.T) {
	t.Parallel()
	filled := make(chan struct{})
	var wound atomic.Value
	backend := jobtest.HeldFunc(func(ctx context.Context, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		rep.Report(ops.Event{Step: "stop", Status: ops.StepDone, Message: "stopped"})
		<-filled
		rep.Report(ops.Event{Step: "start", Status: ops.StepDone, Message: "started the previous unit again"})
		testkit.Poll(10*time.Second, func() bool { return hold.WindDownAsked() != nil })
		err := hold.WindDownAsked()
		wound.Store(fmt.Sprint(err))
		return &ops.Result{Summary: "qwen serves steps 3 as before"}, fmt.Errorf("stopped before the write: %w; the unit is unchanged and serves again", err)
	})
	h := newHarness(t, backend, roles)
	ctx := context.Background()
	r := h.handle("olga", "mtp steps 8 qwen")
	if r.Outcome != Queued {
		t.Fatalf("%s %q", r.Outcome, r.Text)
	}
	testkit.WaitFor(t, 10*time.Second, "the job's first event stored", func() bool {
		evs, _ := h.store.Events(ctx, r.JobID)
		return len(evs) == 1
	})
	fillStore(t, h.store)
	close(filled)
	testkit.WaitFor(t, 10*time.Second, "the thread told the store refuses writes", func() bool {
		_, reps := h.chat.Thread("1")
		for _, m := range reps {
			if strings.Contains(m.Text, "store refuses writes") && strings.Contains(m.Text, "makes no new change") {
				return true
			}
		}
		return false
	})
	testkit.WaitFor(t, 10*time.Second, "the pipeline asked to wind down", func() bool { return wound.Load() != nil })
	if err := h.store.WriteHealth(); !errors.Is(err, store.ErrRefusingWrites) {
		t.Fatalf("write health %v", err)
	}
	if err := h.store.LimitSize(ctx, -1); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the job and its events recorded once the store takes writes", func() bool {
		j, _ := h.store.Job(ctx, r.JobID)
		evs, _ := h.store.Events(ctx, r.JobID)
		return j.Status.Final() && len(evs) == 2
	})
	j, _ := h.store.Job(ctx, r.JobID)
	if j.Status != store.Failed || !strings.Contains(j.Error, "store refuses writes") || !strings.Contains(j.Error, "unchanged and serves again") {
		t.Fatalf("recorded %s %q; want failed, naming the store and the state", j.Status, j.Error)
	}
	evs, _ := h.store.Events(ctx, r.JobID)
	if len(evs) != 2 || evs[1].Step != "start" {
		t.Fatalf("events %+v; want both, the refused one recorded later", evs)
	}
	testkit.WaitFor(t, 10*time.Second, "the final edit", func() bool {
		h.eng.ShowFinals(ctx)
		edits, _ := h.chat.Thread("1")
		return len(edits) > 0 && edits[len(edits)-1].Final
	})
	edits, _ := h.chat.Thread("1")
	if last := edits[len(edits)-1]; !last.Final || last.Status != StatusFailed || !strings.Contains(last.Text, "store refuses writes") {
		t.Fatalf("last edit %+v", last)
	}
}
