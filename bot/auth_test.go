package bot

import (
	"context"
	"github.com/opsbot/opsbot/auth"
	"strings"
	"sync"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/store"
)

type groupsOf map[string][]string

func (g groupsOf) GroupsOf(user string) []string { return g[user] }

// roomLevels is a RoomLevels the test sets by hand: the Matrix adapter's
// real one is tested against Dendrite in bot/matrix.
type roomLevels struct {
	mu sync.Mutex
	m  map[string]map[string]int // room -> user -> level
}

func (l *roomLevels) LevelIn(room, user string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	users, ok := l.m[room]
	return users[user], ok
}

func (l *roomLevels) set(room, user string, level int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[room] == nil {
		l.m[room] = map[string]int{}
	}
	l.m[room][user] = level
}

// TestPowerLevelDispatch: the dispatcher decides by the role a user holds in
// the room of the request, for a command and for a confirmation, and a
// refusal says which level would grant the role and what the user's is.
func TestPowerLevelDispatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), nil)
	auth, err := auth.New("none", nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth, err = auth.WithLevelRoles("test", map[string]int{"operator": 50}); err != nil {
		t.Fatal(err)
	}
	lv := &roomLevels{m: map[string]map[string]int{}}
	lv.set("ops", "bob", 50)
	lv.set("lab", "bob", 0)
	h.disp.opts.Auth = auth.WithRoomLevels("test", lv)
	ctx := context.Background()
	in := func(room, text string) Reply {
		return h.disp.Handle(ctx, Request{Platform: "test", User: "bob", Room: room, Text: text})
	}

	r := in("ops", "mtp steps 10 qwen")
	if r.Outcome != Queued {
		t.Fatalf("bob at 50 in ops: %s %q, want queued", r.Outcome, r.Text)
	}
	if j := h.wait(r.JobID); j.Status != store.Succeeded {
		t.Fatalf("bob's job: %s", j.Status)
	}
	r = in("lab", "mtp steps 10 qwen")
	if r.Outcome != Refused || !strings.Contains(r.Text, "needs the operator role; you have none") ||
		!strings.Contains(r.Text, "a power level of 50 in this room grants it too (yours is 0)") {
		t.Fatalf("bob at 0 in lab: %s %q", r.Outcome, r.Text)
	}

	// A confirmation is authorised again when it is given, in its room.
	r = in("ops", "svc stop qwen")
	if r.Outcome != NeedsConfirm {
		t.Fatalf("svc stop: %s %q", r.Outcome, r.Text)
	}
	confirm, _ := r.Action(ActConfirm)
	lv.set("ops", "bob", 10)
	c := h.disp.Act(ctx, ActionRequest{ID: confirm.ID, Platform: "test", User: "bob", Room: "ops"})
	if c.Outcome != Refused || !strings.Contains(c.Text, "(yours is 10)") {
		t.Fatalf("confirm after bob was lowered to 10: %s %q", c.Outcome, c.Text)
	}
	lv.set("ops", "bob", 50)
	c = h.disp.Act(ctx, ActionRequest{ID: confirm.ID, Platform: "test", User: "bob", Room: "ops"})
	if c.Outcome != Queued {
		t.Fatalf("confirm at 50 again: %s %q", c.Outcome, c.Text)
	}
	h.wait(c.JobID)

	// A scheduled run of bob's counts his level in its first room on his
	// platform.
	sched := func(to ...Target) Reply {
		return h.disp.Handle(ctx, Request{Platform: PlatformSchedule, Text: "mtp steps 10 qwen",
			Schedule: &ScheduleRun{ID: 7, Creator: "test:bob", To: to}})
	}
	if r := sched(Target{"slack", "C1"}, Target{"test", "ops"}); r.Outcome != Queued {
		t.Fatalf("scheduled run reporting to ops, bob at 50 there: %s %q", r.Outcome, r.Text)
	} else {
		h.wait(r.JobID)
	}
	if r := sched(Target{"test", "lab"}, Target{"test", "ops"}); r.Outcome != Refused {
		t.Fatalf("scheduled run reporting to lab first, bob at 0 there: %s %q", r.Outcome, r.Text)
	}
}

// BenchmarkRoleIn: the role check of a request from a Matrix room with
// matrix.power_levels, by id and by level (the adapter's cache answers).
//
//	go test -run XXX -bench RoleIn ./bot/
func BenchmarkRoleIn(b *testing.B) {
	a, err := auth.New("none", map[string]string{"matrix:@vic:hs": "viewer"})
	if err != nil {
		b.Fatal(err)
	}
	if a, err = a.WithLevelRoles("matrix", map[string]int{"viewer": 0, "operator": 50, "admin": 100}); err != nil {
		b.Fatal(err)
	}
	lv := &roomLevels{m: map[string]map[string]int{}}
	lv.set("!a", "@bob:hs", 50)
	a = a.WithRoomLevels("matrix", lv)
	for b.Loop() {
		if a.RoleIn("matrix", "!a", "@bob:hs") != commands.Operator {
			b.Fatal("bob is not an operator")
		}
	}
}
