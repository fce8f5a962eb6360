package matrix_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// TestApprovalByReaction: on a real Dendrite, alice's `!svc restart qwen`
// (auth.two_person) is answered with a request to approve by reaction; her
// own ✅ on it is refused and runs nothing; carol's (a second operator) ✅
// runs the job as alice's, its status message naming carol; carol's ❌ on a
// second request drops it and nothing runs.
func TestApprovalByReaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testkit.Context(t, time.Minute)
	carol := e.hs.Register(t, "carol")
	if _, err := e.alice.Client.InviteUser(ctx, e.room, &mautrix.ReqInviteUser{UserID: carol.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Client.JoinRoomByID(ctx, e.room); err != nil {
		t.Fatal(err)
	}
	e.cfg.Auth.Users["matrix:"+string(carol.ID)] = config.RoleEverywhere("operator")
	e.cfg.Auth.TwoPerson.Commands = []string{"svc restart qwen"}
	in := e.start(nil)
	in.waitReady(t)
	jobsNow := func() []store.Job {
		js, err := in.app.Store.ListJobs(context.Background(), store.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	react := func(who string, c *mautrix.Client, to id.EventID, key string) msg {
		t.Helper()
		r, err := c.SendReaction(ctx, e.room, to, key)
		if err != nil {
			t.Fatalf("%s reacts %s: %v", who, key, err)
		}
		return e.rootOf(t, r.EventID)
	}

	cmd := send(t, e.alice, e.room, "!svc restart qwen")
	request := e.rootOf(t, cmd)
	if !strings.Contains(request.Body, "React ✅ to approve") || !strings.Contains(request.Body, "awaiting anyone but") {
		t.Fatalf("request: %q", request.Body)
	}
	if self := react("alice", e.alice.Client, request.ID, "✅"); !strings.Contains(self.Body, "a second person must approve it") {
		t.Errorf("alice's own ✅: %q; want it refused", self.Body)
	}
	if js := jobsNow(); len(js) != 0 {
		t.Fatalf("the requester's own ✅ started %+v", js)
	}
	if ok := react("carol", carol.Client, request.ID, "✅"); !strings.Contains(ok.Body, "approved by") || !strings.Contains(ok.Body, "queued") {
		t.Errorf("carol's ✅: %q; want approved, queued", ok.Body)
	}
	root := e.seen.Wait(t, 30*time.Second, "the approved job's status", func(m msg) bool {
		return m.Sender == e.botU.ID && m.Type == "m.room.message" && m.ReplyTo == cmd && m.RelType == "" && m.ID != request.ID
	})
	final := e.finalEdit(t, root, "succeeded")
	if !strings.Contains(final.NewBody, "approved by") {
		t.Errorf("the job's status does not say who approved it: %q", final.NewBody)
	}
	if js := jobsNow(); len(js) != 1 || js[0].User != string(e.alice.ID) {
		t.Fatalf("jobs after the approval: %+v; want one, alice's", js)
	}

	cmd = send(t, e.alice, e.room, "!svc restart qwen")
	request = e.rootOf(t, cmd)
	if no := react("carol", carol.Client, request.ID, "❌"); !strings.Contains(no.Body, "rejected by") {
		t.Errorf("carol's ❌: %q; want the request rejected", no.Body)
	}
	if js := jobsNow(); len(js) != 1 {
		t.Errorf("%d jobs after a rejected request, want only the approved one", len(js))
	}
}
