package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/schedule"
	"github.com/opsbot/opsbot/store"
	"github.com/opsbot/opsbot/watchdog"
)

// haOptions configure haMachines.
type haOptions struct {
	faults    []lab.Fault
	schedules string        // YAML added to the config (schedules, a slack section)
	env       []string      // added to the machines' environment
	scale     int           // the scheduler clock's factor (default 12)
	ttl       time.Duration // limits.lease_ttl (default leaseTTL, 3 s)
}

// The default scheduler clock, 12x, fires a `* * * * *` schedule every 5
// s, longer than a takeover (lease_ttl 3 s and a poll): a firing is never
// missed because its holder died just before it.

// haMachines is one PostgreSQL database and one lab shared by two `opsbot
// serve` "machines" (machineAttr: PID, UTS and mount namespaces of their
// own, hostnames side-a and side-b), each with the test chat adapter.
type haMachines struct {
	t     testing.TB
	ctx   context.Context
	lab   *lab.Lab
	cfg   string
	st    *store.Store
	scale string
	env   []string
	procs map[string]*opsbotProc
	bases map[string]string
	// hosts maps the lease owners seen (holder) to their hosts: a dead
	// owner's row is pruned from the store.
	hosts map[string]string
}

func newHAMachines(t testing.TB, ctx context.Context, o haOptions) *haMachines {
	t.Helper()
	if o.scale == 0 {
		o.scale = 12
	}
	if o.ttl == 0 {
		o.ttl = leaseTTL
	}
	l, cfg, st := leaseLabOn(t, ctx, o.faults, pgtest.Database(t))
	for _, svc := range l.Topology().Services {
		if err := l.WaitReady(ctx, svc.Name); err != nil {
			t.Fatalf("lab service %s: %v", svc.Name, err)
		}
	}
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A short benchmark, well under the 5 s between two firings.
	text := regexp.MustCompile(`(?m)^bench: .*$`).ReplaceAllLiteralString(string(b), "bench: {prompts: 4, concurrency: 2, input_len: 64, output_len: 16}")
	text = strings.Replace(text, "lease_ttl: "+leaseTTL.String(), "lease_ttl: "+o.ttl.String(), 1)
	writeFile(t, cfg, text+"http: {listen: \"127.0.0.1:0\"}\n"+o.schedules)
	return &haMachines{t: t, ctx: ctx, lab: l, cfg: cfg, st: st,
		scale: fmt.Sprintf("%d@%s", o.scale, time.Now().UTC().Format(time.RFC3339Nano)), env: o.env,
		procs: map[string]*opsbotProc{}, bases: map[string]string{}, hosts: map[string]string{}}
}

// twoMachines is newHAMachines for a test of its own (Long, needing
// PostgreSQL and root), bounded by 4 minutes.
func twoMachines(t *testing.T, o haOptions) *haMachines {
	t.Helper()
	testrun.Long(t)
	pgtest.Skip(t)
	skipWithoutMachines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return newHAMachines(t, ctx, o)
}

// start boots (or boots again) the machine host and waits until it is ready.
func (h *haMachines) start(host string) {
	h.t.Helper()
	p := spawnWith(h.t, h.ctx, machineAttr(), append([]string{"OPSBOT_TEST_ADAPTER=extra", machineEnv + "=" + host,
		SchedulerTimeScaleEnv + "=" + h.scale}, h.env...), "serve", "--config", h.cfg)
	base := serveURL(h.t, p)
	pollServe(h.t, p, time.Minute, host+" ready", func() bool { code, _ := httpGet(h.t, base+"/readyz"); return code == 200 })
	h.procs[host], h.bases[host] = p, base
}

// kill ends host's whole PID namespace (SIGKILL to its first process) and
// returns when it is gone.
func (h *haMachines) kill(host string) time.Time {
	h.t.Helper()
	p := h.procs[host]
	at := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		h.t.Fatal(err)
	}
	<-p.done
	return at
}

// holder returns the host that holds lease key ("" when none does).
func (h *haMachines) holder(key string) string {
	ls, err := h.st.Leases(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, l := range ls {
		if l.Key == key {
			h.hosts[l.Owner] = l.OwnerHost
			return l.OwnerHost
		}
	}
	return ""
}

func (h *haMachines) all() []*opsbotProc {
	var out []*opsbotProc
	for _, p := range h.procs {
		out = append(out, p)
	}
	return out
}

// edits returns the messages host's chat adapter edited.
func (h *haMachines) edits(host string) []testEdit {
	_, body := httpGet(h.t, h.bases[host]+"/test/edits")
	var es []testEdit
	if err := json.Unmarshal([]byte(body), &es); err != nil {
		h.t.Fatalf("/test/edits of %s: %v: %s", host, err, body)
	}
	return es
}

// stop ends both machines with SIGTERM and checks that they exit 0.
func (h *haMachines) stop() {
	h.t.Helper()
	for host, p := range h.procs {
		select {
		case <-p.done:
			continue
		default:
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			h.t.Fatal(err)
		}
		if code := p.wait(h.t, time.Minute); code != 0 {
			h.t.Errorf("serve on %s after SIGTERM: exit %d\n%s", host, code, p.out.String())
		}
	}
}

// Two `opsbot serve` on two "machines" (namespaces of their own) share one
// PostgreSQL store and one lab, with a schedule every minute on a 12x
// scheduler clock. Over six firings or more, the scheduler's holder is
// killed (its whole namespace, right after it fired) twice: the other
// side takes the lease and every firing runs exactly once, with no
// minute missed and no minute run twice, claimed by both sides in turn.
func TestTwoMachinesFireEachScheduleOnce(t *testing.T) {
	t.Parallel()
	h := twoMachines(t, haOptions{schedules: haSchedule})
	f := fireThroughKills(h, 3, 2)
	for _, e := range f.errs {
		t.Error(e)
	}
	if len(f.claimers) != 2 || f.claimers["side-a"] == 0 || f.claimers["side-b"] == 0 {
		t.Errorf("firings claimed by %v: want both sides in turn", f.claimers)
	}
	t.Logf("%d firings, %d jobs, claimed by %v; scheduler takeovers after kill -9: %v (lease_ttl %s)",
		f.firings, f.jobs, f.claimers, f.takeovers, leaseTTL)
}

// BenchmarkFiringsTwoMachines counts firings against scheduled jobs over
// 100 firings of a minute schedule with two `opsbot serve` machines on one
// PostgreSQL store, the scheduler's holder killed (kill -9 of its
// namespace) after every 20 firings and booted again as the standby. The
// scheduler clock runs 30x (a minute every 2 s) with lease_ttl 1 s. Not in
// CI (a few minutes):
//
//	go test -tags goolm ./cmd/opsbot -run '^$' -bench FiringsTwoMachines -benchtime 1x
func BenchmarkFiringsTwoMachines(b *testing.B) {
	pgtest.Skip(b)
	skipWithoutMachines(b)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		h := newHAMachines(b, ctx, haOptions{schedules: haSchedule, scale: 30, ttl: time.Second})
		f := fireThroughKills(h, 5, 20)
		cancel()
		for _, e := range f.errs {
			b.Error(e)
		}
		var worst time.Duration
		for _, d := range f.takeovers {
			worst = max(worst, d)
		}
		b.ReportMetric(float64(f.firings), "firings")
		b.ReportMetric(float64(f.jobs), "jobs")
		b.ReportMetric(float64(f.gaps), "minutes-missed")
		b.ReportMetric(worst.Seconds(), "worst-takeover-s")
		b.Logf("%d firings, %d jobs, %d minutes missed, claimed by %v; takeovers %v (lease_ttl 1s)", f.firings, f.jobs, f.gaps, f.claimers, f.takeovers)
	}
}

// haSchedule is a schedule every minute whose job (a short benchmark) ends
// well within a minute of the fast clocks here.
const haSchedule = `schedules:
  - {cron: "* * * * *", command: "bench qwen", as: "console:oncall", to: "console:ops", missed: run}
`

// firingStats is what fireThroughKills saw.
type firingStats struct {
	firings, jobs, gaps int
	claimers            map[string]int // firings claimed, by host
	takeovers           []time.Duration
	errs                []string // broken promises: a firing doubled, missed or without its one job
}

// fireThroughKills boots side-a and side-b, lets the schedule fire perRound
// times, kills the holder of the scheduler lease (its whole namespace,
// right after its last firing's job finished), waits for the other side to
// take the lease, boots the killed side again as the standby, and so on for
// rounds rounds; then stops both and checks the firings: one a minute, none
// missed or doubled, each with exactly one job, every job succeeded.
func fireThroughKills(h *haMachines, rounds, perRound int) firingStats {
	t := h.t
	t.Helper()
	h.start("side-a")
	h.start("side-b")
	list, err := h.st.Schedules(h.ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("schedules %+v, %v", list, err)
	}
	id := list[0].ID
	firings := func() []store.Firing {
		fs, err := h.st.Firings(h.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	// settled reports whether n firings are claimed, each with its job, finished.
	settled := func(n int) bool {
		fs, jobs := firings(), scheduledJobs(t, h.st, id)
		if len(fs) < n || len(jobs) != len(fs) {
			return false
		}
		for _, j := range jobs {
			if !j.Status.Final() {
				return false
			}
		}
		return true
	}
	var st firingStats
	want := 0
	for round := range rounds {
		want += perRound
		poll(t, time.Duration(perRound)*time.Minute, fmt.Sprintf("%d firings, each with its finished job", want), func() bool { return settled(want) }, h.all()...)
		want = len(firings())
		victim := h.holder(schedule.SchedulerLease) // who fired these
		if round == rounds-1 {
			break
		}
		if victim == "" {
			t.Fatal("nobody holds the scheduler lease")
		}
		other := map[string]string{"side-a": "side-b", "side-b": "side-a"}[victim]
		killed := h.kill(victim)
		poll(t, time.Minute, other+" to take the scheduler lease", func() bool { return h.holder(schedule.SchedulerLease) == other }, h.all()...)
		st.takeovers = append(st.takeovers, time.Since(killed).Round(time.Millisecond))
		h.start(victim) // back as the standby
	}
	h.stop()

	fs := firings()
	jobs := scheduledJobs(t, h.st, id)
	st.firings, st.jobs, st.claimers = len(fs), len(jobs), map[string]int{}
	if len(jobs) != len(fs) {
		st.errs = append(st.errs, fmt.Sprintf("%d scheduled jobs for %d firings", len(jobs), len(fs)))
	}
	for i, f := range fs {
		st.claimers[h.hosts[f.ClaimedBy]]++
		if i == 0 {
			continue
		}
		if d := f.At.Sub(fs[i-1].At); d != time.Minute {
			st.gaps += max(0, int(d/time.Minute)-1)
			st.errs = append(st.errs, fmt.Sprintf("firings %s and %s: want one every minute, none missed or doubled",
				fs[i-1].At.Format(time.TimeOnly), f.At.Format(time.TimeOnly)))
		}
	}
	for _, j := range jobs {
		if j.Status != store.Succeeded {
			st.errs = append(st.errs, fmt.Sprintf("scheduled job #%d: %s %s", j.ID, j.Status, j.Error))
		}
	}
	return st
}

// scheduledJobs returns the jobs schedule id started.
func scheduledJobs(t testing.TB, st *store.Store, id int64) []store.Job {
	t.Helper()
	jobs, err := st.ListJobs(context.Background(), store.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Job
	for _, j := range jobs {
		if j.ScheduleID == id {
			out = append(out, j)
		}
	}
	return out
}

// Two `opsbot serve` on two "machines" share one PostgreSQL store and one
// lab. `mtp steps 10` on side-a waits for qwen's engine; `mtp steps 6` on
// side-b waits for it and says whom for (side-a's job and pid, as side-a
// sees it). Then side-a's whole namespace is killed mid-job: side-b
// reports side-a's job interrupted, edits its status message, and takes
// qwen within lease_ttl + 5 s, finding the unit the old or the new text;
// its own job then succeeds.
func TestTwoMachinesKilledMidJob(t *testing.T) {
	t.Parallel()
	// 150 s of lab time: about 6 s of wall-clock time in "wait until ready".
	h := twoMachines(t, haOptions{faults: []lab.Fault{{Name: "slow-load", Duration: 150 * time.Second}}})
	h.start("side-a")
	h.start("side-b")
	before, err := h.lab.Host("gpu1").ReadFile("/etc/systemd/system/" + h.lab.Topology().Services[0].Unit)
	if err != nil {
		t.Fatal(err)
	}
	ra := command(t, h.bases["side-a"], "tester", "mtp steps 10 qwen")
	if ra.Outcome != "queued" || ra.JobID == 0 {
		t.Fatalf("mtp steps 10 on side-a: %+v", ra)
	}
	first := waitForStep(t, h.st, "mtp steps 10 qwen", "wait until ready", h.procs["side-a"])
	rb := command(t, h.bases["side-b"], "tester", "mtp steps 6 qwen")
	if rb.Outcome != "queued" || rb.JobID == 0 {
		t.Fatalf("mtp steps 6 on side-b: %+v", rb)
	}
	wait := fmt.Sprintf("waiting for qwen: job #%d of opsbot on side-a (pid 1) is changing it", first.ID)
	pollServe(t, h.procs["side-b"], time.Minute, "side-b to say whom it waits for", func() bool {
		_, posts := httpGet(t, h.bases["side-b"]+"/test/posts")
		return strings.Contains(posts, wait)
	})
	if j, _ := h.st.Job(h.ctx, rb.JobID); j.Status != store.Queued {
		t.Fatalf("side-b's job while side-a's holds qwen: %s, want queued", j.Status)
	}

	killed := h.kill("side-a")
	t.Logf("the unit right after the kill: %s text", unitOldOrNew(t, h.lab, string(before)))
	var second store.Job
	pollServe(t, h.procs["side-b"], time.Minute, "side-b's job to take qwen", func() bool {
		second, _ = h.st.Job(h.ctx, rb.JobID)
		return !second.StartedAt.IsZero()
	})
	took := second.StartedAt.Sub(killed)
	if took > leaseTTL+5*time.Second {
		t.Errorf("side-b took qwen %s after side-a was killed, over lease_ttl %s + 5 s", took, leaseTTL)
	}
	pollServe(t, h.procs["side-b"], time.Minute, "side-b to edit side-a's status message to interrupted", func() bool {
		for _, e := range h.edits("side-b") {
			if e.ID == first.Thread && strings.Contains(e.Text, fmt.Sprintf("#%d `mtp steps 10 qwen`", first.ID)) && strings.Contains(e.Text, "interrupted") {
				return true
			}
		}
		return false
	})
	_, posts := httpGet(t, h.bases["side-b"]+"/test/posts")
	if want := fmt.Sprintf("#%d `mtp steps 10 qwen` was interrupted", first.ID); !strings.Contains(posts, want) {
		t.Errorf("side-b's chat does not say %q:\n%s", want, posts)
	}
	pollServe(t, h.procs["side-b"], 2*time.Minute, "side-b's job to finish", func() bool {
		second, _ = h.st.Job(h.ctx, rb.JobID)
		return second.Status.Final()
	})
	if a, _ := h.st.Job(h.ctx, first.ID); a.Status != store.Interrupted || second.Status != store.Succeeded || !second.StartedAt.After(killed) {
		t.Errorf("side-a's job %s, side-b's %s (started %s, kill at %s): want interrupted, then succeeded after the kill",
			a.Status, second.Status, second.StartedAt.Format(time.StampMilli), killed.Format(time.StampMilli))
	}
	h.stop()
	t.Logf("side-b took qwen %s after kill -9 of side-a (lease_ttl %s)", took.Round(time.Millisecond), leaseTTL)
}

// Two `opsbot serve` on two "machines" share one PostgreSQL store and one
// lab: `mtp steps 10` on side-a and `mtp steps 6` on side-b, sent while the
// first waits for the engine, never overlap: side-b's thread says whom it
// waits for, and its job starts only after side-a's ended; both succeed.
func TestTwoMachinesNeverOverlapOnOneService(t *testing.T) {
	t.Parallel()
	// 100 s of lab time: about 4 s of wall-clock time in "wait until ready".
	h := twoMachines(t, haOptions{faults: []lab.Fault{{Name: "slow-load", Duration: 100 * time.Second}}})
	h.start("side-a")
	h.start("side-b")
	ra := command(t, h.bases["side-a"], "tester", "mtp steps 10 qwen")
	first := waitForStep(t, h.st, "mtp steps 10 qwen", "wait until ready", h.procs["side-a"])
	rb := command(t, h.bases["side-b"], "tester", "mtp steps 6 qwen")
	if ra.JobID == 0 || rb.JobID == 0 {
		t.Fatalf("replies %+v and %+v: want two queued jobs", ra, rb)
	}
	wait := fmt.Sprintf("waiting for qwen: job #%d of opsbot on side-a (pid 1) is changing it", first.ID)
	var a, b store.Job
	pollServe(t, h.procs["side-b"], 2*time.Minute, "both jobs to finish", func() bool {
		a, _ = h.st.Job(h.ctx, ra.JobID)
		b, _ = h.st.Job(h.ctx, rb.JobID)
		return a.Status.Final() && b.Status.Final()
	})
	if a.Status != store.Succeeded || b.Status != store.Succeeded || !b.StartedAt.After(a.EndedAt) {
		t.Fatalf("side-a's job %s ran %s..%s, side-b's %s started %s: want both succeeded, one after the other",
			a.Status, a.StartedAt.Format(time.StampMilli), a.EndedAt.Format(time.StampMilli), b.Status, b.StartedAt.Format(time.StampMilli))
	}
	if _, posts := httpGet(t, h.bases["side-b"]+"/test/posts"); !strings.Contains(posts, wait) {
		t.Errorf("side-b's thread does not say %q:\n%s", wait, posts)
	}
	h.stop()
	t.Logf("side-b's job started %s after side-a's ended", b.StartedAt.Sub(a.EndedAt).Round(time.Millisecond))
}

// Two `opsbot serve` machines on one PostgreSQL store behind one Slack app
// in HTTP mode, as behind a load balancer that may hand a delivery, or
// Slack's retry of it, to either: each signed delivery, sent to both at
// once, runs once. One machine acks it with the job; the other answers 409
// and audits the replay. Each machine's opsbot_lease_held says whether it
// holds the scheduler's and the watchdog's lease: one of them does.
func TestTwoMachinesRunEachSlackDeliveryOnce(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	pgtest.Skip(t)
	skipWithoutMachines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	api := newSlackServer(t)
	h := newHAMachines(t, ctx, haOptions{schedules: slackSection(api), env: slackEnv})
	h.start("side-a")
	h.start("side-b")
	// One of the two holds each leader lease, and says so in its metrics.
	for _, lease := range []string{schedule.SchedulerLease, watchdog.WatchdogLease} {
		var by map[string]float64
		pollServe(t, h.procs["side-a"], time.Minute, "one machine to report holding "+lease, func() bool {
			by = map[string]float64{}
			sum := 0.0
			for _, host := range []string{"side-a", "side-b"} {
				v, ok := gauge(scrape(t, h.bases[host]), "opsbot_lease_held", map[string]string{"lease": lease})
				if !ok {
					return false
				}
				by[host] = v
				sum += v
			}
			return sum == 1
		})
		if holder := h.holder(lease); by[holder] != 1 {
			t.Errorf("opsbot_lease_held{lease=%q}: %v, but the store says %s holds it", lease, by, holder)
		}
	}
	const n = 8
	acks := map[string]int{}
	for i := range n {
		d := signedSlash(e2eSigningSecret, time.Now(), "/gpu", "status")
		type answer struct {
			host string
			code int
			body string
		}
		answers := make(chan answer, 2)
		for _, host := range []string{"side-a", "side-b"} {
			go func() {
				code, body := d.post(t, h.bases[host])
				answers <- answer{host, code, body}
			}()
		}
		a, b := <-answers, <-answers
		if a.code == 409 {
			a, b = b, a
		}
		if a.code != 200 || !strings.Contains(a.body, "queued") || b.code != 409 {
			t.Fatalf("delivery %d to both machines: %s answered %d %s, %s answered %d %s; want one ack and one 409",
				i, a.host, a.code, a.body, b.host, b.code, b.body)
		}
		acks[a.host]++
	}
	jobs, err := h.st.ListJobs(h.ctx, store.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != n {
		t.Errorf("%d jobs for %d deliveries", len(jobs), n)
	}
	audit, err := h.st.Audit(h.ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for _, e := range audit {
		if e.Decision == bot.DecisionReplayed {
			replayed++
		}
	}
	if replayed != n {
		t.Errorf("%d replays audited for %d deliveries each sent twice", replayed, n)
	}
	h.stop()
	t.Logf("%d deliveries each sent to both machines at once: %d jobs; acked by %v", n, len(jobs), acks)
}

// Two `opsbot serve` machines on one PostgreSQL store, both connected to
// one Slack app in Socket Mode: Slack hands each envelope to one of the
// connections (the stand-in's connections share one queue), and its retry
// of an envelope to either. Each envelope, sent twice, is acked both times
// and runs once; both machines' connections take envelopes.
func TestTwoMachinesSocketModeRunsEachEnvelopeOnce(t *testing.T) {
	t.Parallel()
	api := newSlackServer(t)
	h := twoMachines(t, haOptions{schedules: socketSection(api)})
	h.start("side-a")
	h.start("side-b")
	const n = 10
	for i := range n {
		id := fmt.Sprintf("env-%d", i)
		cmd := map[string]string{"command": "/gpu", "text": "status", "user_id": e2eOperator, "user_name": "olga",
			"channel_id": e2eChannel, "team_id": "T0TEAM", "response_url": api.URL() + "response/" + id}
		api.Send(id, "slash_commands", cmd)
		api.Send(id, "slash_commands", cmd) // Slack's retry, to whichever connection takes it
	}
	pollServe(t, h.procs["side-a"], time.Minute, "every envelope acked twice", func() bool {
		for i := range n {
			if len(api.Ack(fmt.Sprintf("env-%d", i))) < 2 {
				return false
			}
		}
		return true
	})
	jobs, err := h.st.ListJobs(h.ctx, store.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != n {
		t.Errorf("%d jobs for %d envelopes each delivered twice", len(jobs), n)
	}
	queued := 0
	for i := range n {
		for _, a := range api.Ack(fmt.Sprintf("env-%d", i)) {
			if strings.Contains(string(a.Payload), "queued") {
				queued++
			}
		}
	}
	if queued != n {
		t.Errorf("%d acks name a queued job, want %d: one per envelope", queued, n)
	}
	// Both connections took envelopes; which machine queued each job is
	// whichever claimed it first.
	conns := map[int]int{}
	for i := range n {
		for _, a := range api.Ack(fmt.Sprintf("env-%d", i)) {
			conns[a.Conn]++
		}
	}
	if len(conns) != 2 {
		t.Errorf("acks by Socket Mode connection: %v; want both machines' connections", conns)
	}
	took := map[string]int{}
	for _, host := range []string{"side-a", "side-b"} {
		took[host] = strings.Count(h.procs[host].out.String(), `msg="job queued"`)
	}
	h.stop()
	t.Logf("%d envelopes each delivered twice over two Socket Mode connections: %d jobs; acks by connection %v; jobs queued by machine %v", n, len(jobs), conns, took)
}
