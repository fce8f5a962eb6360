// Package chattest is the chat conformance suite: one table of cases that
// every chat adapter's tests run through their real platform (Slack's
// stand-in, a real Dendrite, the terminal), so that the same commands give
// the same decisions, audit rows and job states everywhere. The decisions
// are the door's (bot.Dispatcher); what the suite checks is that each
// adapter brings every delivery to it and shows what it decided.
package chattest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/store"
)

// User is who sends a case's command.
type User int

// Users of the cases.
const (
	Operator User = iota // holds the operator role
	NoRole               // holds no role
	Second               // holds the operator role too: the second person who approves
	Scoped               // holds the operator role on coder only, and viewer on every service
)

// TwoPerson is the auth.two_person.commands entry every platform's config
// sets for the suite: `svc restart qwen` waits for a second person.
const TwoPerson = "svc restart qwen"

// ScopedRoles is the grant of user Scoped in auth.users' form per
// service: role name to services ("*": every service).
var ScopedRoles = map[string][]string{"operator": {"coder"}, "viewer": {"*"}}

// Room is where a case's command is sent.
type Room int

// Rooms of the cases.
const (
	Allowed Room = iota // a room or channel the config lists
	OffList             // a room the bot is in, not on the list
)

// Sent is a platform's handle of a delivery, for Replay.
type Sent any

// Platform is one chat driven as its users and the platform itself would.
type Platform interface {
	// Name is the platform, as audit rows and jobs record it.
	Name() string
	// Store is the bot's store now (a replay may restart the bot), read to
	// check what was decided.
	Store() *store.Store
	// Send sends text as user in room and returns once the bot answered
	// (or, where it stays silent, once it must have decided).
	Send(t testing.TB, as User, in Room, text string) Sent
	// Replay delivers s again, as the platform does after a crash or to a
	// second process, and returns once the bot has handled it. False when
	// the platform has no deliveries to replay (a terminal): the replay
	// cases are skipped there.
	Replay(t testing.TB, s Sent) bool
	// HasRooms is false when the platform has no rooms to refuse (a
	// terminal): the off-list cases are skipped there.
	HasRooms() bool
	// Said is everything the bot has shown on the platform so far, as its
	// users read it (message text, blocks, edits, thread replies), for the
	// cases that check what a person sees.
	Said(t testing.TB) string
}

// Case is one command and what the door must decide about it.
type Case struct {
	Name string
	As   User
	In   Room
	Text string // without the platform's prefix (! or /)
	// Decision is the audit row's decision (ending in a space: its
	// beginning); Detail a part of its detail.
	Decision, Detail string
	// Job is the final state of the job it creates; "" when it creates none.
	Job store.Status
	// Replay sends the delivery again: it must run nothing and be audited
	// once as replayed.
	Replay bool
	// Shows are lines the platform must show once the job ended (its
	// result as the user reads it).
	Shows []string
}

// tokenWord in a case's Text stands for the token of the newest approval
// waiting in the store.
const tokenWord = "{token}"

// Cases are the conformance table. The replay comes first: a platform may
// replay everything since the case's delivery (a Matrix sync rewound).
var Cases = []Case{
	{Name: "a replayed delivery", As: Operator, In: Allowed, Text: "svc status coder", Decision: store.DecisionAccepted,
		Detail: "job queued", Job: store.Succeeded, Replay: true},
	{Name: "an answer", As: Operator, In: Allowed, Text: "help mtp", Decision: store.DecisionAccepted, Detail: "answered"},
	{Name: "a job", As: Operator, In: Allowed, Text: "svc status qwen", Decision: store.DecisionAccepted, Detail: "job queued",
		Job: store.Succeeded},
	{Name: "no role", As: NoRole, In: Allowed, Text: "mtp steps 10 qwen", Decision: store.DecisionRefused, Detail: "needs the operator role",
		Job: store.Refused},
	{Name: "a room off the list", As: Operator, In: OffList, Text: "svc status qwen", Decision: store.DecisionRefused, Detail: "is not in"},
	// Two-person approval: the request waits in the store; its requester
	// and a user without the role cannot approve it; a second operator can,
	// and the job runs as the requester's, audited with both.
	{Name: "two-person: the request waits", As: Operator, In: Allowed, Text: TwoPerson, Decision: "approval_asked",
		Detail: "awaiting anyone but"},
	{Name: "two-person: the requester cannot approve", As: Operator, In: Allowed, Text: "approve " + tokenWord,
		Decision: store.DecisionRefused, Detail: "the requester cannot approve their own command"},
	{Name: "two-person: no role cannot approve", As: NoRole, In: Allowed, Text: "approve " + tokenWord,
		Decision: store.DecisionRefused, Detail: "you may not approve this"},
	{Name: "two-person: a second person approves", As: Second, In: Allowed, Text: "approve " + tokenWord,
		Decision: "approved by ", Detail: "job queued", Job: store.Succeeded},
	// Roles per service: a command on another service is refused, naming
	// the services the user may change; on their own service it runs.
	{Name: "a role on its own service", As: Scoped, In: Allowed, Text: "svc restart coder --dry-run",
		Decision: store.DecisionAccepted, Detail: "job queued", Job: store.Succeeded},
	// A viewer's `gpu health`: one verdict line per GPU of the service,
	// with the action that helps next and its figures, rendered by each
	// platform (the lab's GPUs are healthy; its kernel log is readable).
	{Name: "gpu health", As: Scoped, In: Allowed, Text: "gpu health qwen", Decision: store.DecisionAccepted, Detail: "job queued",
		Job: store.Succeeded, Shows: []string{"GPU health: 4 healthy", "pve GPU 0 (qwen, ", "pve GPU 3 (qwen, ", "): healthy",
			"next: nothing", "Xid: 0 since boot, 0 in 24 h", "PCIe gen 5 x16 of gen 5 x16"}},
	{Name: "a role on some services refused on another", As: Scoped, In: Allowed, Text: "mtp steps 3 qwen",
		Decision: store.DecisionRefused, Detail: "needs the operator role on qwen; you have viewer there. You may change: coder.", Job: store.Refused},
}

// Run runs every case on p, each after the last, checking the audit rows
// and jobs each adds.
func Run(t *testing.T, p Platform) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.In == OffList && !p.HasRooms() {
				t.Skipf("%s has no rooms to refuse", p.Name())
			}
			auditBefore, jobsBefore := audit(t, p.Store(), p.Name()), jobs(t, p.Store(), p.Name())
			sent := p.Send(t, c.As, c.In, withToken(t, p.Store(), c.Text))
			entry := waitAudit(t, p.Store(), p.Name(), len(auditBefore), c)
			if !strings.Contains(entry.Detail, c.Detail) {
				t.Errorf("audit detail %q, want it to say %q", entry.Detail, c.Detail)
			}
			job := waitJob(t, p.Store(), p.Name(), len(jobsBefore), c)
			if c.Job != "" && entry.JobID != 0 && entry.JobID != job.ID {
				t.Errorf("the audit row names job #%d, the job is #%d", entry.JobID, job.ID)
			}
			waitShown(t, p, c)
			if !c.Replay {
				return
			}
			n := len(audit(t, p.Store(), p.Name()))
			if !p.Replay(t, sent) {
				t.Skipf("%s has no deliveries to replay", p.Name())
			}
			if !p.Replay(t, sent) { // twice: audited once, counted after
				t.Fatal("the second replay could not be sent")
			}
			added := audit(t, p.Store(), p.Name())[n:]
			if len(added) != 1 || added[0].Decision != "replayed" {
				t.Errorf("audit rows after two replays: %+v; want one, replayed", added)
			}
			if js := jobs(t, p.Store(), p.Name()); len(js) != len(jobsBefore)+1 {
				t.Errorf("%d jobs after the replays, want %d: the replay ran", len(js), len(jobsBefore)+1)
			}
		})
	}
}

func audit(t testing.TB, st *store.Store, platform string) []store.AuditEntry {
	t.Helper()
	all, err := st.Audit(context.Background(), store.AuditFilter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AuditEntry
	for i := len(all) - 1; i >= 0; i-- { // oldest first
		if all[i].Platform == platform {
			out = append(out, all[i])
		}
	}
	return out
}

func jobs(t testing.TB, st *store.Store, platform string) []store.Job {
	t.Helper()
	all, err := st.ListJobs(context.Background(), store.JobFilter{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Job
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Platform == platform {
			out = append(out, all[i])
		}
	}
	return out
}

// waitAudit waits for the case's audit row, the first after the n there
// were, and checks its decision.
func waitAudit(t testing.TB, st *store.Store, platform string, n int, c Case) store.AuditEntry {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rows := audit(t, st, platform)
		if len(rows) > n {
			e := rows[n]
			if e.Decision != c.Decision && !(strings.HasSuffix(c.Decision, " ") && strings.HasPrefix(e.Decision, c.Decision)) {
				t.Fatalf("audit decision %q (%s), want %q", e.Decision, e.Detail, c.Decision)
			}
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit row for %q within 20s", c.Text)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitJob waits for the case's job to end, the first after the n there
// were, and checks its state; with no job expected, it checks none was made.
func waitJob(t testing.TB, st *store.Store, platform string, n int, c Case) store.Job {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		js := jobs(t, st, platform)
		if c.Job == "" {
			if len(js) != n {
				t.Fatalf("%d jobs, want %d: %q made a job", len(js), n, c.Text)
			}
			return store.Job{}
		}
		if len(js) > n && js[n].Status.Final() {
			if js[n].Status != c.Job {
				t.Fatalf("job #%d %s (%s), want %s", js[n].ID, js[n].Status, js[n].Error, c.Job)
			}
			return js[n]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no final job for %q within 2m: %+v", c.Text, js)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withToken puts the newest waiting approval's token for tokenWord in text.
func withToken(t testing.TB, st *store.Store, text string) string {
	t.Helper()
	if !strings.Contains(text, tokenWord) {
		return text
	}
	waiting, err := st.PendingApprovals(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(waiting) == 0 {
		t.Fatalf("%q: no approval waits in the store", text)
	}
	return strings.ReplaceAll(text, tokenWord, waiting[len(waiting)-1].Token)
}

// waitShown waits until the platform shows each of c.Shows.
func waitShown(t testing.TB, p Platform, c Case) {
	t.Helper()
	if len(c.Shows) == 0 {
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		said := p.Said(t)
		var missing []string
		for _, w := range c.Shows {
			if !strings.Contains(said, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not show %q within 20s; it showed:\n%s", p.Name(), missing, said)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
