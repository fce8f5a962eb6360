package matrix_test

import (
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/internal/dendritetest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// setLevel sets user's power level in room by a m.room.power_levels state
// event sent by admin (the room's creator).
func setLevel(t testing.TB, admin *dendritetest.User, room id.RoomID, user id.UserID, level int) {
	t.Helper()
	ctx := testkit.Context(t, 30*time.Second)
	var pl event.PowerLevelsEventContent
	if err := admin.Client.StateEvent(ctx, room, event.StatePowerLevels, "", &pl); err != nil {
		t.Fatalf("read the power levels of %s: %v", room, err)
	}
	if pl.Users == nil {
		pl.Users = map[id.UserID]int{}
	}
	pl.Users[user] = level
	if _, err := admin.Client.SendStateEvent(ctx, room, event.StatePowerLevels, "", &pl); err != nil {
		t.Fatalf("set %s to power level %d in %s: %v", user, level, room, err)
	}
}

// TestPowerLevelRoles: with matrix.power_levels {operator: 50}, bob (no role
// in auth.users) is refused at level 0, and runs an operator command once
// the room's admin raised him to 50, without a restart; the level he holds
// in one allowed room grants nothing in another where he is at 0; a
// restarted bot (which resumes the sync, without the rooms' state) still
// knows his level; a confirmation by reaction is judged by his level when
// he reacts; a config reload changes which levels grant roles.
func TestPowerLevelRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testkit.Context(t, time.Minute)
	resp, err := e.alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "public_chat",
		Invite: []id.UserID{e.botU.ID, e.bob.ID}})
	if err != nil {
		t.Fatalf("create the second room: %v", err)
	}
	room2 := resp.RoomID
	if _, err := e.bob.Client.JoinRoomByID(ctx, room2); err != nil {
		t.Fatalf("bob joins the second room: %v", err)
	}
	e.cfg.Matrix.Rooms = append(e.cfg.Matrix.Rooms, string(room2))
	e.cfg.Matrix.PowerLevels = map[string]int{"operator": 50}
	in := e.start(nil)
	in.waitReady(t)

	const op = "!mtp steps 10 --dry-run"
	refused := func(room id.RoomID, why string) {
		t.Helper()
		r := e.rootOf(t, send(t, e.bob, room, op))
		if !strings.Contains(r.Body, "needs the operator role; you have none") ||
			!strings.Contains(r.Body, "a power level of 50 in this room grants it too (yours is 0)") {
			t.Fatalf("%s: bob's `%s` answered %q, want refused, naming level 50 and his 0", why, op, r.Body)
		}
	}
	runs := func(room id.RoomID, why string) {
		t.Helper()
		r := e.rootOf(t, send(t, e.bob, room, op))
		if strings.Contains(r.Body, "needs the operator role") {
			t.Fatalf("%s: bob refused: %q", why, r.Body)
		}
		e.finalEdit(t, r, "succeeded")
	}

	refused(e.room, "level 0")
	// The room's admin raises bob; his next command runs (the change and the
	// command arrive in order, in the same or consecutive syncs).
	setLevel(t, e.alice, e.room, e.bob.ID, 50)
	runs(e.room, "raised to 50")
	refused(room2, "level 50 in the other room, 0 in this one")

	// A restart resumes the sync, which carries no state: the levels are read.
	in.stop()
	in = e.start(nil)
	in.waitReady(t)
	runs(e.room, "level 50, after a restart")

	// A confirmation is authorised when it is given: bob lowered to 0 after
	// asking, his ✅ is refused.
	ask := send(t, e.bob, e.room, "!svc stop coder")
	preview := e.rootOf(t, ask)
	if !strings.Contains(preview.Body, "React ✅ to confirm") {
		t.Fatalf("preview: %q", preview.Body)
	}
	setLevel(t, e.alice, e.room, e.bob.ID, 0)
	react, err := e.bob.Client.SendReaction(testkit.Context(t, 30*time.Second), e.room, preview.ID, "✅")
	if err != nil {
		t.Fatal(err)
	}
	if r := e.rootOf(t, react.EventID); !strings.Contains(r.Body, "needs the operator role; you have none") {
		t.Fatalf("bob's ✅ at level 0: %q", r.Body)
	}
	jobs, err := in.app.Store.ListJobs(testkit.Context(t, 10*time.Second), store.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if strings.Contains(j.Command, "svc stop") && j.Status != store.Refused {
			t.Errorf("job #%d `%s` is %s: the refused confirmation ran it", j.ID, j.Command, j.Status)
		}
	}

	// A config reload changes the levels that grant roles: operator from 0
	// lets bob (at 0) run in the second room.
	cfg := *e.cfg
	m := *cfg.Matrix
	m.PowerLevels = map[string]int{"operator": 0}
	cfg.Matrix = &m
	if err := in.app.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	runs(room2, "operator: 0 after a reload")
}
