package bot

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/opsbot/opsbot/auth"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// Every spec of the registry is either answered here or a job command
// with a pipeline (commands.Job), never both; a command that asks for
// confirmation says what it will do (commands.Previewer).
func TestEverySpecHasOneHandler(t *testing.T) {
	t.Parallel()
	for _, s := range commands.Specs() {
		c, err := commands.Decode([]byte(`{"v":1,"command":"` + s.Path + `"}`))
		if err != nil {
			t.Fatalf("%s: %v", s.Path, err)
		}
		_, job := c.(commands.Job)
		answered := answerFor(c) != nil
		if answered != (!s.Hosts || s.Answered) || job != s.Hosts {
			t.Errorf("%s: answered here %v, a job %v, policy says hosts %v, answered %v: want it answered here when the policy says so, and a Run exactly when it runs on hosts",
				s.Path, answered, job, s.Hosts, s.Answered)
		}
		if _, ok := c.(commands.Previewer); s.Confirm && !ok {
			t.Errorf("%s asks for confirmation but has no preview", s.Path)
		}
	}
}

func countingBackend(ran *atomic.Int32) jobtest.Func {
	return func(context.Context, commands.Job, ops.Reporter) (*ops.Result, error) {
		ran.Add(1)
		return &ops.Result{}, nil
	}
}

func (h *harness) act(user, id string) Reply {
	return h.disp.Act(context.Background(), ActionRequest{ID: id, Platform: "test", User: user, Room: "ops"})
}

func (h *harness) audit(user string) []store.AuditEntry {
	h.t.Helper()
	rows, err := h.store.Audit(context.Background(), store.AuditFilter{Limit: 10000})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []store.AuditEntry
	for _, r := range rows {
		if user == "" || r.User == user {
			out = append(out, r)
		}
	}
	return out
}

// Only the user who asked may confirm: a user without a role typing the
// token, and an admin clicking Confirm, are refused; neither uses the
// confirmation up, and the requester's confirm then runs it.
func TestConfirmBelongsToRequester(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, countingBackend(&ran), roles)
	r := h.handle("olga", "gpu recover qwen")
	confirm, ok := r.Action(ActConfirm)
	if r.Outcome != NeedsConfirm || !ok || !strings.Contains(r.Text, "confirm "+r.Token) || r.Audience != ToUser {
		t.Fatalf("gpu recover: %s %q %+v", r.Outcome, r.Text, r.Actions)
	}
	if _, ok := r.Action(ActAbort); !ok || confirm.Expires.IsZero() {
		t.Fatalf("preview offers %+v: want Confirm and Abort with an expiry", r.Actions)
	}
	if c := h.handle("mallory", "confirm "+r.Token); c.Outcome != Refused {
		t.Fatalf("mallory typing the token: %s %q", c.Outcome, c.Text)
	}
	if c := h.act("alice", confirm.ID); c.Outcome != Refused || !strings.Contains(c.Text, "only olga") {
		t.Fatalf("admin clicking olga's confirm: %s %q", c.Outcome, c.Text)
	}
	if c := h.act("alice", "abort:"+r.Token); c.Outcome != Refused {
		t.Fatalf("admin aborting olga's confirm: %s %q", c.Outcome, c.Text)
	}
	other := h.disp.Handle(context.Background(), Request{Platform: "test", User: "olga", Room: "elsewhere", Text: "confirm " + r.Token})
	if other.Outcome != Invalid {
		t.Fatalf("confirm from another room: %s", other.Outcome)
	}
	if ran.Load() != 0 {
		t.Fatal("a refused confirmation ran the command")
	}
	c := h.handle("olga", "confirm "+r.Token)
	if c.Outcome != Queued {
		t.Fatalf("olga's confirm after the refusals: %s %q", c.Outcome, c.Text)
	}
	if j := h.wait(c.JobID); j.User != "olga" || j.Status != store.Succeeded {
		t.Fatalf("job %+v: want olga's, succeeded", j)
	}
	if again := h.handle("olga", "confirm "+r.Token); again.Outcome != Invalid {
		t.Fatalf("token reused: %s", again.Outcome)
	}
	// Abort drops it: the token no longer confirms.
	r = h.handle("olga", "svc stop qwen")
	if a := h.act("olga", "abort:"+r.Token); a.Outcome != Answered || !strings.Contains(a.Text, "aborted") {
		t.Fatalf("abort: %s %q", a.Outcome, a.Text)
	}
	if c := h.handle("olga", "confirm "+r.Token); c.Outcome != Invalid {
		t.Fatalf("confirm after abort: %s", c.Outcome)
	}
	// Expiry.
	r = h.handle("olga", "svc stop qwen")
	later := time.Now().Add(2 * time.Minute)
	h.now.Store(&later)
	if c := h.handle("olga", "confirm "+r.Token); c.Outcome != Invalid || !strings.Contains(c.Text, "expired") {
		t.Fatalf("expired confirm: %s %q", c.Outcome, c.Text)
	}
	h.now.Store(nil)
	if ran.Load() != 1 {
		t.Fatalf("ran %d pipelines, want exactly the confirmed one", ran.Load())
	}
	// Dry runs need no confirmation.
	if d := h.handle("olga", "gpu recover qwen --dry-run"); d.Outcome != Queued {
		t.Fatalf("dry run: %s %q", d.Outcome, d.Text)
	}
}

// What the bot proposes belongs to the room: anyone there holding the role
// the command needs may confirm it, and the job is the confirmer's.
func TestProposalConfirmableByRole(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, countingBackend(&ran), roles)
	p := h.disp.Propose(context.Background(), "test", "ops", "gpu recover qwen", "qwen is in a restart loop: GPU memory is held.")
	if p.Outcome != NeedsConfirm || p.Audience != ToRoom || !strings.Contains(p.Text, "restart loop") || !strings.Contains(p.Text, "operator role") {
		t.Fatalf("proposal: %s %d %q", p.Outcome, p.Audience, p.Text)
	}
	a, _ := p.Action(ActConfirm)
	if c := h.act("vic", a.ID); c.Outcome != Refused {
		t.Fatalf("viewer confirming a proposal: %s %q", c.Outcome, c.Text)
	}
	c := h.act("olga", a.ID)
	if c.Outcome != Queued {
		t.Fatalf("operator confirming a proposal: %s %q", c.Outcome, c.Text)
	}
	if j := h.wait(c.JobID); j.User != "olga" {
		t.Fatalf("proposal's job is %s's, want the confirmer's", j.User)
	}
	if ran.Load() != 1 {
		t.Fatalf("ran %d", ran.Load())
	}
}

// A job may be cancelled by the user who started it or an admin; anyone
// else is refused, audited with the job's id, and the job runs on.
func TestCancelByOwnerOrAdmin(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 4)
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}), map[string]string{"test:alice": "admin", "test:olga": "operator", "test:bob": "operator", "test:vic": "viewer"})
	a := h.handle("olga", "mtp steps 4 qwen")
	cancelA, ok := a.Action(ActCancel)
	if a.Outcome != Queued || !ok {
		t.Fatalf("job: %s %+v", a.Outcome, a.Actions)
	}
	<-started
	for _, u := range []string{"bob", "vic"} {
		if r := h.act(u, cancelA.ID); r.Outcome != Refused || !strings.Contains(r.Text, "test:olga") {
			t.Fatalf("%s cancelling olga's job: %s %q", u, r.Outcome, r.Text)
		}
	}
	if r := h.handle("bob", fmt.Sprintf("cancel %d", a.JobID)); r.Outcome != Refused {
		t.Fatalf("bob typing cancel: %s %q", r.Outcome, r.Text)
	}
	refusals := 0
	for _, e := range h.audit("bob") {
		if e.Decision == store.DecisionRefused {
			refusals++
			if e.JobID != a.JobID {
				t.Errorf("refused cancel audited with job %d, want %d", e.JobID, a.JobID)
			}
		}
	}
	if refusals != 2 {
		t.Errorf("%d refused cancels of bob audited, want 2", refusals)
	}
	if j, _ := h.store.Job(context.Background(), a.JobID); j.Status != store.Running {
		t.Fatalf("job after refused cancels: %s", j.Status)
	}
	if r := h.act("olga", cancelA.ID); r.Outcome != Answered {
		t.Fatalf("olga cancelling her job: %s %q", r.Outcome, r.Text)
	}
	if j := h.wait(a.JobID); j.Status != store.Cancelled {
		t.Fatalf("olga's job: %s", j.Status)
	}
	b := h.handle("olga", "mtp steps 5 qwen")
	<-started
	if r := h.handle("alice", fmt.Sprintf("cancel #%d", b.JobID)); r.Outcome != Answered {
		t.Fatalf("admin cancelling: %s %q", r.Outcome, r.Text)
	}
	if j := h.wait(b.JobID); j.Status != store.Cancelled {
		t.Fatalf("job cancelled by an admin: %s", j.Status)
	}
}

// Tokens carry 128 random bits.
func TestTokenCarries128Bits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	seen := map[string]bool{}
	for range 8 {
		r := h.handle("olga", "svc stop qwen")
		b, err := hex.DecodeString(r.Token)
		if err != nil || len(b)*8 < 64 || len(b) != TokenBytes {
			t.Fatalf("token %q: %d bits (%v)", r.Token, len(b)*8, err)
		}
		if seen[r.Token] {
			t.Fatalf("token %s issued twice", r.Token)
		}
		seen[r.Token] = true
	}
}

// Guessing tokens: after WrongLimit wrong attempts a user is refused until
// the window ends, the burst is audited once, and the pending confirmation
// of another user is untouched.
func TestWrongConfirmationsRateLimited(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, countingBackend(&ran), roles)
	r := h.handle("olga", "gpu recover qwen")
	invalid, limited := 0, 0
	for i := range 3000 {
		c := h.handle("mallory", fmt.Sprintf("confirm %032x", i))
		switch {
		case c.Outcome == Invalid:
			invalid++
		case c.Outcome == Refused && strings.Contains(c.Text, "too many wrong"):
			limited++
		default:
			t.Fatalf("guess %d: %s %q", i, c.Outcome, c.Text)
		}
	}
	if invalid != DefaultWrongLimit || limited != 3000-DefaultWrongLimit {
		t.Fatalf("%d guesses answered, %d refused; want %d answered", invalid, limited, DefaultWrongLimit)
	}
	// The right token from the guesser is refused too while locked out.
	if c := h.handle("mallory", "confirm "+r.Token); c.Outcome != Refused {
		t.Fatalf("locked-out user with the right token: %s", c.Outcome)
	}
	if n := len(h.audit("mallory")); n != 1 {
		t.Fatalf("%d audit rows for one burst of guesses, want 1", n)
	}
	// Each user has their own limit: olga's confirmation still works.
	if c := h.handle("olga", "confirm "+r.Token); c.Outcome != Queued {
		t.Fatalf("olga's confirm after the guessing: %s %q", c.Outcome, c.Text)
	}
	// After the window, a new burst starts (and is audited once more).
	later := time.Now().Add(DefaultWrongWindow + time.Second)
	h.now.Store(&later)
	if c := h.handle("mallory", "confirm 00"); c.Outcome != Invalid {
		t.Fatalf("after the window: %s %q", c.Outcome, c.Text)
	}
	if n := len(h.audit("mallory")); n != 2 {
		t.Fatalf("%d audit rows after two bursts, want 2", n)
	}
}

// Pending confirmations are capped per user and in all; a new one never
// replaces another: every token asked still confirms its own command.
func TestPendingCapNoOverwrite(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, countingBackend(&ran), roles)
	h.disp.opts.MaxPendingPerUser = 3
	h.disp.opts.MaxPending = 4
	var toks []string
	for range 3 {
		r := h.handle("olga", "svc stop qwen")
		if r.Outcome != NeedsConfirm {
			t.Fatalf("ask: %s %q", r.Outcome, r.Text)
		}
		toks = append(toks, r.Token)
	}
	if r := h.handle("olga", "svc stop qwen"); r.Outcome != Failed || !strings.Contains(r.Text, "too many confirmations") {
		t.Fatalf("over the per-user cap: %s %q", r.Outcome, r.Text)
	}
	if r := h.handle("alice", "svc stop llama"); r.Outcome != NeedsConfirm {
		t.Fatalf("another user under the total cap: %s %q", r.Outcome, r.Text)
	}
	if r := h.handle("alice", "svc stop llama"); r.Outcome != Failed {
		t.Fatalf("over the total cap: %s %q", r.Outcome, r.Text)
	}
	for _, tok := range toks {
		c := h.handle("olga", "confirm "+tok)
		if c.Outcome != Queued {
			t.Fatalf("confirm %s: %s %q", tok, c.Outcome, c.Text)
		}
		h.wait(c.JobID)
	}
	if ran.Load() != 3 {
		t.Fatalf("ran %d, want the 3 confirmed", ran.Load())
	}
}

// Acting as another user needs the admin role; the audit names both.
func TestViaNeedsAdmin(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, countingBackend(&ran), roles)
	ctx := context.Background()
	r := h.disp.Handle(ctx, Request{Platform: "test", User: "alice", Via: "olga", Room: "ops", Text: "svc restart qwen"})
	if r.Outcome != Refused || r.JobID == 0 || !strings.Contains(r.Text, "admin") {
		t.Fatalf("operator acting as the admin: %s %q job %d", r.Outcome, r.Text, r.JobID)
	}
	rows := h.audit("alice")
	if len(rows) != 1 || rows[0].JobID != r.JobID || !strings.Contains(rows[0].Detail, "test:olga as test:alice") {
		t.Fatalf("audit %+v: want the refusal naming both, with job #%d", rows, r.JobID)
	}
	ok := h.disp.Handle(ctx, Request{Platform: "test", User: "olga", Via: "alice", Room: "ops", Text: "svc restart qwen"})
	if ok.Outcome != Queued {
		t.Fatalf("admin acting as olga: %s %q", ok.Outcome, ok.Text)
	}
	if j := h.wait(ok.JobID); j.User != "olga" {
		t.Fatalf("job user %q, want olga", j.User)
	}
	rows = h.audit("olga")
	if len(rows) != 1 || !strings.Contains(rows[0].Detail, "test:alice as test:olga") || rows[0].JobID != ok.JobID {
		t.Fatalf("audit %+v: want test:alice as test:olga", rows)
	}
	if ran.Load() != 1 {
		t.Fatalf("ran %d", ran.Load())
	}
}

// The --as rule is one rule with one message: a request and an action
// (a click, `confirm TOKEN`) made as another user by a non-admin are
// refused alike, saying how to go on, and audited naming both.
func TestViaOneRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	req := h.disp.Handle(ctx, Request{Platform: "test", User: "alice", Via: "olga", Room: "ops", Text: "svc restart qwen"})
	act := h.disp.Act(ctx, ActionRequest{ID: "cancel:1", Platform: "test", User: "alice", Via: "olga", Room: "ops"})
	typed := h.disp.Handle(ctx, Request{Platform: "test", User: "alice", Via: "olga", Room: "ops", Text: "confirm 0123456789abcdef0123456789abcdef"})
	want := "acting as test:alice needs the admin role; test:olga has operator. Run it as yourself (without --as)."
	for _, r := range []Reply{req, act, typed} {
		var refused *RefusedError
		if r.Outcome != Refused || r.Text != want || !errors.As(r.Err, &refused) || refused.Need != commands.Admin {
			t.Errorf("%s %q (%v), want refused: %q", r.Outcome, r.Text, r.Err, want)
		}
	}
	rows := h.audit("alice")
	if len(rows) != 3 {
		t.Fatalf("audit %+v: want the three refusals", rows)
	}
	for _, row := range rows {
		if row.Decision != store.DecisionRefused || !strings.Contains(row.Detail, "test:olga as test:alice") {
			t.Errorf("audit row %+v: want a refusal naming both", row)
		}
	}
}

func TestAuthRejectsKeysWithoutID(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"console:", ":alice", "alice", "console: "} {
		if _, err := auth.New("none", map[string]string{k: "admin"}); err == nil {
			t.Errorf("auth.New accepted key %q", k)
		}
	}
	if _, err := auth.New("none", map[string]string{"console:alice": "admin", "matrix:@u:hs.example": "viewer"}); err != nil {
		t.Fatal(err)
	}
}

// A refused request's audit row names its job row.
func TestRefusedAuditedWithJobID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	r := h.handle("vic", "mtp steps 10 qwen")
	if r.Outcome != Refused || r.JobID == 0 {
		t.Fatalf("%s job %d", r.Outcome, r.JobID)
	}
	rows := h.audit("vic")
	if len(rows) != 1 || rows[0].Decision != store.DecisionRefused || rows[0].JobID != r.JobID {
		t.Fatalf("audit %+v: want one refusal with job #%d", rows, r.JobID)
	}
}

// Scheduled runs come through the same door, as platform schedule: with
// their creator's role at run time, no confirmation (given at schedule add),
// their thread in the first target room.
func TestScheduledRunDoor(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	h := newHarness(t, countingBackend(&ran), roles)
	ctx := context.Background()
	run := func(creator, text string) Reply {
		return h.disp.Handle(ctx, Request{Platform: PlatformSchedule, Text: text,
			Schedule: &ScheduleRun{ID: 7, Creator: creator, To: []Target{{Platform: "test", Room: "ops"}, {Platform: "matrix", Room: "!oncall:hs"}}}})
	}
	r := run("test:olga", "gpu recover qwen")
	if r.Outcome != Queued || r.Audience != ToRoom || len(r.Rooms) != 2 {
		t.Fatalf("scheduled gpu recover: %s %q rooms %v", r.Outcome, r.Text, r.Rooms)
	}
	j := h.wait(r.JobID)
	if j.Platform != "test" || j.Room != "ops" || j.User != "test:olga" || j.ScheduleID != 7 || j.Status != store.Succeeded {
		t.Fatalf("scheduled job %+v", j)
	}
	if _, replies := h.chat.Thread(j.Thread); len(replies) == 0 {
		t.Fatal("no thread in the first target room")
	}
	// The creator lost the role: refused, with a job row.
	ref := run("test:vic", "gpu recover qwen")
	if ref.Outcome != Refused || ref.JobID == 0 || !strings.Contains(ref.Text, "schedule #7") {
		t.Fatalf("creator without the role: %s %q", ref.Outcome, ref.Text)
	}
	if rj, _ := h.store.Job(ctx, ref.JobID); rj.ScheduleID != 7 || rj.Status != store.Refused {
		t.Fatalf("refused scheduled job %+v", rj)
	}
	if x := run("test:alice", "schedule rm 1"); x.Outcome != Invalid {
		t.Fatalf("non-schedulable command on a schedule: %s", x.Outcome)
	}
	if x := h.disp.Handle(ctx, Request{Platform: PlatformSchedule, Text: "bench qwen"}); x.Outcome != Invalid {
		t.Fatalf("schedule platform without its schedule: %s", x.Outcome)
	}
	if x := h.disp.Handle(ctx, Request{Platform: "test", User: "olga", Room: "ops", Text: "gpu recover qwen",
		Schedule: &ScheduleRun{ID: 1, Creator: "test:olga"}}); x.Outcome != Invalid {
		t.Fatalf("a chat request carrying a schedule: %s", x.Outcome)
	}
	if ran.Load() != 1 {
		t.Fatalf("ran %d, want the one allowed run", ran.Load())
	}
}

// schedule add|rm|pause|resume --dry-run change nothing.
func TestScheduleDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	r := h.handle("alice", `schedule add --dry-run "0 3 * * *" svc restart qwen`)
	if r.Outcome != Answered || !strings.Contains(r.Text, "dry run") {
		t.Fatalf("add --dry-run: %s %q", r.Outcome, r.Text)
	}
	if l, _ := h.store.Schedules(ctx); len(l) != 0 {
		t.Fatalf("add --dry-run stored %+v", l)
	}
	if r := h.handle("alice", `schedule add "0 3 * * *" svc restart qwen`); r.Outcome != Answered || !strings.Contains(r.Text, "#1 added") {
		t.Fatalf("add: %s %q", r.Outcome, r.Text)
	}
	for _, c := range []string{"schedule pause 1 --dry-run", "schedule rm 1 --dry-run"} {
		if r := h.handle("alice", c); r.Outcome != Answered || !strings.Contains(r.Text, "dry run") {
			t.Fatalf("%s: %s %q", c, r.Outcome, r.Text)
		}
	}
	h.handle("alice", "schedule pause 1")
	if r := h.handle("alice", "schedule resume 1 --dry-run"); r.Outcome != Answered || !strings.Contains(r.Text, "dry run") {
		t.Fatalf("resume --dry-run: %s %q", r.Outcome, r.Text)
	}
	l, err := h.store.Schedules(ctx)
	if err != nil || len(l) != 1 || !l[0].Paused {
		t.Fatalf("schedules after dry runs %+v err %v: want #1, paused", l, err)
	}
	if r := h.handle("alice", "schedule rm 9 --dry-run"); r.Outcome != Invalid {
		t.Fatalf("dry run on a missing schedule: %s", r.Outcome)
	}
}

// Scheduling a command that needs confirmation asks for it at schedule add;
// only the confirmation adds the schedule.
func TestScheduleAddAsksConfirmation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	ctx := context.Background()
	r := h.handle("alice", `schedule add @daily gpu recover qwen`)
	if r.Outcome != NeedsConfirm || !strings.Contains(r.Text, "without asking again") {
		t.Fatalf("schedule add of gpu recover: %s %q", r.Outcome, r.Text)
	}
	if l, _ := h.store.Schedules(ctx); len(l) != 0 {
		t.Fatalf("added before confirmation: %+v", l)
	}
	if c := h.handle("alice", "confirm "+r.Token); c.Outcome != Answered || !strings.Contains(c.Text, "added") {
		t.Fatalf("confirm: %s %q", c.Outcome, c.Text)
	}
	if l, _ := h.store.Schedules(ctx); len(l) != 1 || l[0].Command != "gpu recover qwen" || l[0].CreatedBy != "alice" {
		t.Fatalf("schedules %+v", l)
	}
}

// BenchmarkGuessConfirm measures how fast wrong `confirm TOKEN` guesses are
// answered once the guesser is locked out, and reports how many guesses per
// burst got an answer at all (the rest are refused unseen).
func BenchmarkGuessConfirm(b *testing.B) {
	h := newHarness(b, jobtest.OK(), roles)
	answered := 0
	b.ResetTimer()
	for i := range b.N {
		if r := h.handle("mallory", fmt.Sprintf("confirm %032x", i)); r.Outcome == Invalid {
			answered++
		}
	}
	b.ReportMetric(float64(answered), "answered-guesses")
}
