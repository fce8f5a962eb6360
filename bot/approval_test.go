package bot

import (
	"context"
	"github.com/opsbot/opsbot/auth"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/store"
)

// scopedConfig is the harness's two services on one Proxmox node, sharing
// GPU 1, with roles per service and two-person rules.
func scopedConfig(twoPerson, unattended []string) *config.Config {
	pve := &config.Proxmox{Node: "pve", VMID: 129}
	return &config.Config{
		Services: map[string]config.Service{
			"qwen":  {Host: "gpu1", Proxmox: pve, GPUs: []int{0, 1}},
			"llama": {Host: "gpu2", Proxmox: pve, GPUs: []int{1, 2}},
		},
		Auth: config.Auth{DefaultRole: "none", Users: map[string]config.Grant{
			"test:alice": config.RoleEverywhere("admin"),
			"test:olga":  config.RoleEverywhere("operator"),
			"test:otto":  config.RoleEverywhere("operator"),
			"test:vic":   config.RoleEverywhere("viewer"),
			"test:sam":   {Roles: map[string][]string{"operator": {"llama"}, "viewer": {"*"}}},
			// A group of operators of qwen only.
			"test-group:QWEN": {Roles: map[string][]string{"operator": {"qwen"}}},
		}, TwoPerson: config.TwoPerson{Commands: twoPerson, Unattended: unattended}},
	}
}

// scopedHarness is a harness whose auth comes from scopedConfig, with
// test:gus in group QWEN.
func scopedHarness(t *testing.T, twoPerson, unattended []string) *harness {
	t.Helper()
	h := newHarness(t, jobtest.OK(), nil)
	auth, err := auth.FromConfig(scopedConfig(twoPerson, unattended))
	if err != nil {
		t.Fatal(err)
	}
	h.disp.opts.Auth = auth.WithMembership("test", groupsOf{"gus": {"QWEN"}})
	return h
}

// TestTwoPersonAfterConfirmation: a listed command, once its requester
// confirmed it, waits for a second person: the request says who is
// awaited; the requester and a viewer cannot approve it; another operator,
// through another process on the store, can, and the job is the
// requester's, its status message and audit row naming both.
func TestTwoPersonAfterConfirmation(t *testing.T) {
	t.Parallel()
	h := scopedHarness(t, []string{"svc stop"}, nil)
	r := h.handle("olga", "svc stop qwen")
	if r.Outcome != NeedsConfirm {
		t.Fatalf("svc stop qwen: %s %q, want its confirmation first", r.Outcome, r.Text)
	}
	a, _ := r.Action(ActConfirm)
	r = h.act("olga", a.ID)
	if r.Outcome != NeedsApproval || r.Token == "" || r.Audience != ToRoom {
		t.Fatalf("confirmed: %s %q, want a request for approval to the room", r.Outcome, r.Text)
	}
	for _, want := range []string{"asked by olga", "awaiting anyone but olga with the operator role on qwen (a member of test-group:QWEN, test:alice, test:otto)", "approve " + r.Token} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("request %q does not say %q", r.Text, want)
		}
	}
	if _, ok := r.Action(ActApprove); !ok {
		t.Errorf("request offers no Approve: %+v", r.Actions)
	}
	tok := r.Token
	if x := h.handle("olga", "approve "+tok); x.Outcome != Refused || !strings.Contains(x.Text, "a second person must approve it") {
		t.Errorf("the requester approves: %s %q, want refused", x.Outcome, x.Text)
	}
	if x := h.handle("vic", "approve "+tok); x.Outcome != Refused || !strings.Contains(x.Text, "needs the operator role") {
		t.Errorf("a viewer approves: %s %q, want refused naming the role", x.Outcome, x.Text)
	}
	if js, _ := h.store.ListJobs(context.Background(), store.JobFilter{Limit: 10}); len(js) != 0 {
		t.Fatalf("a job before the approval: %+v", js)
	}
	d2, eng2, chat2 := h.secondProcess(t)
	x := d2.Handle(context.Background(), Request{Platform: "test", User: "otto", UserName: "otto", Room: "elsewhere", Text: "approve " + tok})
	if x.Outcome != Queued || !strings.Contains(x.Text, "approved by otto") {
		t.Fatalf("otto approves from another process: %s %q", x.Outcome, x.Text)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := eng2.Wait(ctx, x.JobID)
	if err != nil || j.User != "olga" || j.Room != "ops" || j.Status != store.Succeeded {
		t.Fatalf("the approved job: %+v %v; want olga's, in her room, succeeded", j, err)
	}
	rows := auditOf(t, h.store, "approved by test:otto")
	if len(rows) != 1 || rows[0].User != "olga" || rows[0].JobID != j.ID {
		t.Fatalf("audit of the approval: %+v; want one row of olga's job naming otto", rows)
	}
	if len(auditOf(t, h.store, DecisionApprovalAsked)) != 1 {
		t.Error("the request for approval was not audited")
	}
	shown := false
	for _, p := range chat2.Posts() {
		shown = shown || strings.Contains(p.Text, "by olga, approved by otto")
	}
	if !shown {
		t.Errorf("no status message says who approved: %+v", chat2.Posts())
	}
	if x := h.handle("alice", "approve "+tok); x.Outcome != Invalid {
		t.Errorf("a second approval: %s %q, want invalid", x.Outcome, x.Text)
	}
}

// TestApprovalExpiresAndRejects: an approval past auth.two_person.expires
// starts nothing and is audited expired; the requester may withdraw a
// request and another operator may reject one, each audited.
func TestApprovalExpiresAndRejects(t *testing.T) {
	t.Parallel()
	h := scopedHarness(t, []string{"svc restart"}, nil)
	ask := func() string {
		t.Helper()
		r := h.handle("olga", "svc restart qwen")
		if r.Outcome != NeedsApproval {
			t.Fatalf("svc restart qwen: %s %q, want a request for approval", r.Outcome, r.Text)
		}
		return r.Token
	}
	tok := ask()
	later := time.Now().Add(config.DefaultApprovalTTL + time.Minute)
	h.now.Store(&later)
	if x := h.handle("otto", "approve "+tok); x.Outcome != Invalid || !strings.Contains(x.Text, "expired") {
		t.Fatalf("approved after it expired: %s %q", x.Outcome, x.Text)
	}
	if len(auditOf(t, h.store, store.DecisionExpired)) != 1 {
		t.Error("the expiry was not audited")
	}
	h.now.Store(nil)
	tok = ask()
	if x := h.handle("olga", "reject "+tok); x.Outcome != Answered || !strings.Contains(x.Text, "withdrawn by the requester") {
		t.Errorf("the requester withdraws: %s %q", x.Outcome, x.Text)
	}
	tok = ask()
	if x := h.act("otto", string(ActReject)+":"+tok); x.Outcome != Answered || !strings.Contains(x.Text, "rejected by otto") {
		t.Errorf("otto rejects: %s %q", x.Outcome, x.Text)
	}
	if n := len(auditOf(t, h.store, DecisionRejected)); n != 2 {
		t.Errorf("%d rejections audited, want 2", n)
	}
	if js, _ := h.store.ListJobs(context.Background(), store.JobFilter{Limit: 10}); len(js) != 0 {
		t.Fatalf("jobs after an expiry and two rejections: %+v", js)
	}
}

// TestUnattendedRunsOfTwoPersonCommands: scheduled and watchdog runs of a
// command that waits for a second person are skipped, saying so, unless
// auth.two_person.unattended lets them run alone.
func TestUnattendedRunsOfTwoPersonCommands(t *testing.T) {
	t.Parallel()
	sched := Request{Platform: PlatformSchedule, Text: "svc restart qwen",
		Schedule: &ScheduleRun{ID: 3, Creator: "test:alice", To: []Target{{Platform: "test", Room: "ops"}}}}
	dog := Request{Platform: PlatformWatchdog, User: WatchdogUser, Text: "gpu recover qwen",
		Watchdog: &WatchdogRun{Incident: 9, Service: "qwen", To: []Target{{Platform: "test", Room: "ops"}}}}
	h := scopedHarness(t, []string{"svc restart", "gpu recover"}, nil)
	ctx := context.Background()
	if r := h.disp.Handle(ctx, sched); r.Outcome != Refused || !strings.Contains(r.Text, "schedule #3 skipped `svc restart qwen`") ||
		!strings.Contains(r.Text, "auth.two_person.unattended") {
		t.Errorf("scheduled run: %s %q, want skipped", r.Outcome, r.Text)
	}
	if r := h.disp.Handle(ctx, dog); r.Outcome != Refused || !strings.Contains(r.Text, "watchdog incident #9 skipped `gpu recover qwen`") {
		t.Errorf("watchdog run: %s %q, want skipped", r.Outcome, r.Text)
	}
	h = scopedHarness(t, []string{"svc restart", "gpu recover"}, []string{"svc restart", "gpu recover"})
	if r := h.disp.Handle(ctx, sched); r.Outcome != Queued {
		t.Errorf("scheduled run allowed alone: %s %q, want queued", r.Outcome, r.Text)
	}
	if r := h.disp.Handle(ctx, dog); r.Outcome != Queued {
		t.Errorf("watchdog run allowed alone: %s %q, want queued", r.Outcome, r.Text)
	}
}

// TestRolesPerService: a role granted on some services counts there only;
// a refusal names the services the user may change; a command that may
// reap on a node needs the role on every service sharing its GPUs; a
// group's grant per service works the same.
func TestRolesPerService(t *testing.T) {
	t.Parallel()
	h := scopedHarness(t, nil, nil)
	cases := []struct {
		user, text string
		want       Outcome
		says       string
	}{
		{"sam", "svc stop qwen", Refused, "needs the operator role on qwen; you have viewer there. You may change: llama."},
		{"sam", "svc stop llama", NeedsConfirm, ""},        // operator on llama; a stop reaps nothing
		{"sam", "svc status qwen", Queued, ""},             // viewer everywhere
		{"sam", "jobs", Answered, ""},                      // about no service: the role on every service
		{"sam", "schedule list", Answered, ""},             // likewise
		{"sam", "mtp steps 4 llama --dry-run", Queued, ""}, // a dry run reaps nothing
		{"sam", "mtp steps 4 llama", Refused, "may stop processes on GPUs that llama shares with qwen, so it needs the operator role on each of llama, qwen; you lack it on qwen. You may change: llama."},
		{"gus", "svc stop qwen", NeedsConfirm, ""}, // a group's grant on qwen
		{"gus", "svc stop llama", Refused, "You may change: qwen."},
		{"gus", "jobs", Refused, "needs the viewer role"}, // nothing granted on every service
		{"olga", "gpu recover llama", NeedsConfirm, ""},   // a plain role is every service's
	}
	for _, c := range cases {
		r := h.handle(c.user, c.text)
		if r.Outcome != c.want || !strings.Contains(r.Text, c.says) {
			t.Errorf("%s %q: %s %q, want %s saying %q", c.user, c.text, r.Outcome, r.Text, c.want, c.says)
		}
	}
}
