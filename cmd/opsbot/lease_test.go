package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// Two `opsbot run` processes (this test binary run as opsbot, see TestMain)
// on one store and one lab: the leases in the store keep them apart.

// opsbotProc is a running opsbot child process.
type opsbotProc struct {
	cmd    *exec.Cmd
	out    *testkit.Buffer // stdout and stderr
	stdout *testkit.Buffer // stdout alone
	done   chan struct{}
	err    error
}

func startOpsbot(t *testing.T, ctx context.Context, args ...string) *opsbotProc {
	t.Helper()
	return spawn(t, ctx, nil, args...)
}

// spawn runs this test binary as opsbot with args (and env added), killed
// when ctx ends or the test does.
func spawn(t testing.TB, ctx context.Context, env []string, args ...string) *opsbotProc {
	t.Helper()
	return spawnWith(t, ctx, nil, env, args...)
}

// spawnWith is spawn with the child's process attributes (its namespaces).
func spawnWith(t testing.TB, ctx context.Context, attr *syscall.SysProcAttr, env []string, args ...string) *opsbotProc {
	t.Helper()
	p := &opsbotProc{out: &testkit.Buffer{}, stdout: &testkit.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	p.cmd.SysProcAttr = attr
	// A temporary directory of its own: a child killed with SIGKILL cannot remove the lab's
	// and --lab's directories it made, and the machine's /tmp must stay as it was.
	tmp := t.TempDir()
	p.cmd.Env = append(append(os.Environ(), "OPSBOT_TEST_MAIN=1", "TMPDIR="+tmp), env...)
	p.cmd.Stdout, p.cmd.Stderr = io.MultiWriter(p.out, p.stdout), p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *opsbotProc) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("opsbot %v still running after %s:\n%s", p.cmd.Args[3:], d, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// leaseLab starts the lab and writes a config for it with a short lease ttl.
func leaseLab(t *testing.T, ctx context.Context, faults []lab.Fault) (l *lab.Lab, cfg string, st *store.Store) {
	t.Helper()
	return leaseLabOn(t, ctx, faults, "")
}

// leaseLabOn is leaseLab with the store in the PostgreSQL database at
// pgURL ("": the lab's SQLite file).
func leaseLabOn(t testing.TB, ctx context.Context, faults []lab.Fault, pgURL string) (l *lab.Lab, cfg string, st *store.Store) {
	t.Helper()
	l, err := lab.Start(ctx, lab.Options{Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	dir := t.TempDir()
	cfg, err = l.WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(f, "limits: {lease_ttl: %s}\n", leaseTTL); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if pgURL != "" {
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		text := regexp.MustCompile(`(?m)^store: .*$`).ReplaceAllLiteralString(string(b), "store: {driver: postgres, url: \""+pgURL+"\"}")
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		st, err = store.OpenPostgres(ctx, pgURL, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return l, cfg, st
	}
	st, err = store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return l, cfg, st
}

const leaseTTL = 3 * time.Second

// poll polls cond until it holds or d has passed; then it fails t with
// what it waited for and the output of procs.
func poll(t testing.TB, d time.Duration, what string, cond func() bool, procs ...*opsbotProc) {
	t.Helper()
	if testkit.Poll(d, cond) {
		return
	}
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "--- opsbot %v:\n%s\n", p.cmd.Args[3:], p.out.String())
	}
	t.Fatalf("timed out waiting until %s\n%s", what, b.String())
}

func jobByCommand(t *testing.T, st *store.Store, prefix string) (store.Job, bool) {
	t.Helper()
	jobs, err := st.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if strings.HasPrefix(j.Command, prefix) {
			return j, true
		}
	}
	return store.Job{}, false
}

// waitForStep waits until the job whose command starts with prefix has
// reached step, and returns it (failing the test after a minute, or when p
// exits first).
func waitForStep(t *testing.T, st *store.Store, prefix, step string, p *opsbotProc) store.Job {
	t.Helper()
	var job store.Job
	poll(t, time.Minute, fmt.Sprintf("job %q to reach %q", prefix, step), func() bool {
		var ok bool
		job, ok = jobByCommand(t, st, prefix)
		return ok && reachedStep(st, job.ID, step)
	}, p)
	return job
}

func reachedStep(st *store.Store, id int64, step string) bool {
	evs, _ := st.Events(context.Background(), id)
	for _, e := range evs {
		if strings.HasPrefix(e.Step, step) {
			return true
		}
	}
	return false
}

// Two processes change the same service at the same time: one waits for the
// other, so their jobs' running times never overlap, and both succeed.
func TestTwoProcessesNeverOverlapOnOneService(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	onEachStore(t, testTwoProcessesNeverOverlap)
}

func testTwoProcessesNeverOverlap(t *testing.T, pgURL string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, cfg, st := leaseLabOn(t, ctx, nil, pgURL)
	p1 := startOpsbot(t, ctx, "run", "--config", cfg, "mtp steps 6 qwen")
	p2 := startOpsbot(t, ctx, "run", "--config", cfg, "mtp steps 7 qwen")
	for _, p := range []*opsbotProc{p1, p2} {
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("opsbot %v: exit %d\n%s", p.cmd.Args[3:], code, p.out.String())
		}
	}
	a, okA := jobByCommand(t, st, "mtp steps 6 qwen")
	b, okB := jobByCommand(t, st, "mtp steps 7 qwen")
	if !okA || !okB || a.Status != store.Succeeded || b.Status != store.Succeeded {
		t.Fatalf("jobs: %+v / %+v", a, b)
	}
	if a.Owner == "" || a.Owner == b.Owner {
		t.Fatalf("owners %q and %q: want two processes", a.Owner, b.Owner)
	}
	first, second := a, b
	if b.StartedAt.Before(a.StartedAt) {
		first, second = b, a
	}
	if !second.StartedAt.After(first.EndedAt) {
		t.Fatalf("jobs overlapped: #%d ran %s..%s, #%d started %s", first.ID, first.StartedAt.Format(time.StampMicro),
			first.EndedAt.Format(time.StampMicro), second.ID, second.StartedAt.Format(time.StampMicro))
	}
	t.Logf("#%d ran %.2fs; #%d waited for it and started %.0f ms after it ended",
		first.ID, first.EndedAt.Sub(first.StartedAt).Seconds(), second.ID, second.StartedAt.Sub(first.EndedAt).Seconds()*1000)
	if ls, _ := st.Leases(ctx); len(ls) != 0 {
		t.Fatalf("leases left after both processes exited: %+v", ls)
	}
}

// `jobs` from a second process while the first runs `mtp steps 6` with a slow
// load leaves the first's job running, and it succeeds.
func TestReadOnlyCommandFromSecondProcessLeavesJobRunning(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// 150 s of lab time: about 6 s of wall-clock time in "wait until ready".
	_, cfg, st := leaseLab(t, ctx, []lab.Fault{{Name: "slow-load", Duration: 150 * time.Second}})
	p1 := startOpsbot(t, ctx, "run", "--config", cfg, "mtp steps 6 qwen")
	job := waitForStep(t, st, "mtp steps 6 qwen", "wait until ready", p1)

	p2 := startOpsbot(t, ctx, "run", "--config", cfg, "jobs")
	if code := p2.wait(t, time.Minute); code != 0 {
		t.Fatalf("jobs: exit %d\n%s", code, p2.out.String())
	}
	if want := fmt.Sprintf("#%d `mtp steps 6 qwen` running", job.ID); !strings.Contains(p2.out.String(), want) {
		t.Fatalf("jobs from the second process does not list %q:\n%s", want, p2.out.String())
	}
	if j, _ := st.Job(ctx, job.ID); j.Status != store.Running {
		t.Fatalf("after `jobs` from another process the job is %s (%s), want running", j.Status, j.Error)
	}
	select {
	case <-p1.done:
		t.Fatalf("the first process ended while its job should still load:\n%s", p1.out.String())
	default:
	}
	if code := p1.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("mtp steps 6: exit %d\n%s", code, p1.out.String())
	}
	if j, _ := st.Job(ctx, job.ID); j.Status != store.Succeeded {
		t.Fatalf("job #%d: %s %s", job.ID, j.Status, j.Error)
	}
}

// kill -9 of the process holding qwen: the second process, waiting for qwen,
// takes the lease over once the holder is known dead (its pid gone on this
// machine, or its lease expired), reports the killed job interrupted and
// runs its own job.
func TestKilledHolderIsTakenOverAndReportedInterrupted(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, pgURL string) { testKilledHolderIsTakenOver(t, pgURL, nil) })
}

// The holder as if on another machine (a PID namespace of its own, so its
// pid means nothing to the other process) on a PostgreSQL store: killed
// with SIGKILL, it is known dead only once its lease expires, and the other
// process takes qwen over within limits.lease_ttl + 5 s.
func TestKilledHolderElsewhereIsTakenOverAtExpiry(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	pgtest.Skip(t)
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace of its own needs root")
	}
	took := testKilledHolderIsTakenOver(t, pgtest.Database(t), &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID})
	if took > leaseTTL+5*time.Second {
		t.Errorf("takeover %s after kill -9, over lease_ttl %s + 5 s", took, leaseTTL)
	}
	if took < leaseTTL/2 {
		t.Errorf("takeover %s after kill -9: too soon for a holder known dead only by its expiry (lease_ttl %s)", took, leaseTTL)
	}
}

// testKilledHolderIsTakenOver runs the scenario with the holder started
// with attr, and returns the takeover time.
func testKilledHolderIsTakenOver(t *testing.T, pgURL string, attr *syscall.SysProcAttr) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A load that takes an hour of lab time: the job waits in "wait until ready".
	_, cfg, st := leaseLabOn(t, ctx, []lab.Fault{{Name: "slow-load", Duration: time.Hour}}, pgURL)
	p1 := spawnWith(t, ctx, attr, nil, "run", "--config", cfg, "mtp steps 6 qwen")
	job := waitForStep(t, st, "mtp steps 6 qwen", "wait until ready", p1)

	p2 := startOpsbot(t, ctx, "run", "--config", cfg, "--yes", "svc stop qwen")
	var second store.Job
	poll(t, time.Minute, "the second job waits for qwen", func() bool {
		var ok bool
		second, ok = jobByCommand(t, st, "svc stop qwen")
		return ok && second.Status == store.Queued
	}, p1, p2)
	ls, err := st.Leases(ctx)
	held := false // the service's lease; the node's is held too, from stop to ready
	for _, l := range ls {
		if l.Key == "service:qwen" && l.JobID == job.ID && (l.OwnerPID == p1.cmd.Process.Pid || attr != nil) {
			held = true
		}
	}
	if err != nil || !held {
		t.Fatalf("leases while the first job runs: %+v, %v; want service:qwen held by job #%d of pid %d", ls, err, job.ID, p1.cmd.Process.Pid)
	}
	if j, _ := st.Job(ctx, job.ID); j.Status != store.Running {
		t.Fatalf("the second process's start interrupted the live first job: %s", j.Status)
	}

	killed := time.Now()
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.done
	if code := p2.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("svc stop: exit %d\n%s", code, p2.out.String())
	}
	j1, _ := st.Job(ctx, job.ID)
	j2, _ := st.Job(ctx, second.ID)
	if j1.Status != store.Interrupted {
		t.Fatalf("killed job is %s, want interrupted", j1.Status)
	}
	if j2.Status != store.Succeeded || j2.StartedAt.Before(killed) {
		t.Fatalf("second job %s, started %s (kill at %s)", j2.Status, j2.StartedAt, killed)
	}
	if want := fmt.Sprintf("#%d `mtp steps 6 qwen` was interrupted", job.ID); !strings.Contains(p2.out.String(), want) {
		t.Fatalf("the second process did not report %q:\n%s", want, p2.out.String())
	}
	t.Logf("takeover %.0f ms after kill -9 (lease ttl %s)", j2.StartedAt.Sub(killed).Seconds()*1000, leaseTTL)
	return j2.StartedAt.Sub(killed)
}

// `cancel N` from a second process reaches the job the first runs: the
// answer says where it runs, and the first process cancels it.
func TestCancelFromSecondProcessReachesTheJob(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, cfg, st := leaseLab(t, ctx, []lab.Fault{{Name: "slow-load", Duration: time.Hour}})
	p1 := startOpsbot(t, ctx, "run", "--config", cfg, "mtp steps 6 qwen")
	job := waitForStep(t, st, "mtp steps 6 qwen", "wait until ready", p1)
	p2 := startOpsbot(t, ctx, "run", "--config", cfg, fmt.Sprintf("cancel %d", job.ID))
	if code := p2.wait(t, time.Minute); code != 0 {
		t.Fatalf("cancel: exit %d\n%s", code, p2.out.String())
	}
	if want := "(running in another opsbot process on "; !strings.Contains(p2.out.String(), want) {
		t.Fatalf("cancel from the second process does not say %q:\n%s", want, p2.out.String())
	}
	start := time.Now()
	if code := p1.wait(t, time.Minute); code != 1 {
		t.Fatalf("mtp steps 6 after a cancel from another process: exit %d, want 1\n%s", code, p1.out.String())
	}
	if j, _ := st.Job(ctx, job.ID); j.Status != store.Cancelled {
		t.Fatalf("job #%d: %s %q, want cancelled", job.ID, j.Status, j.Error)
	}
	t.Logf("the first process ended %.0f ms after the cancel was answered", time.Since(start).Seconds()*1000)
}

// Two `opsbot run` on one store (each driver): the second, started while
// the first's job holds qwen, prints in its terminal that it waits and for
// whom (the first's job, host and pid), then once that its job has qwen
// (its running status), and its job starts only after the first's ended.
// With --json the same two lines go to stderr, and stdout is the JSON line
// alone.
func TestRunSaysWhoItWaitsFor(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	onEachStore(t, func(t *testing.T, pgURL string) { testRunSaysWhoItWaitsFor(t, pgURL, false) })
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		testRunSaysWhoItWaitsFor(t, "", true)
	})
}

func testRunSaysWhoItWaitsFor(t *testing.T, pgURL string, asJSON bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// 150 s of lab time: about 6 s of wall-clock time in "wait until ready".
	_, cfg, st := leaseLabOn(t, ctx, []lab.Fault{{Name: "slow-load", Duration: 150 * time.Second}}, pgURL)
	p1 := startOpsbot(t, ctx, "run", "--config", cfg, "mtp steps 6 qwen")
	first := waitForStep(t, st, "mtp steps 6 qwen", "wait until ready", p1)
	args := []string{"run", "--config", cfg, "mtp steps 7 qwen"}
	if asJSON {
		args = []string{"run", "--config", cfg, "--json", "mtp steps 7 qwen"}
	}
	p2 := startOpsbot(t, ctx, args...)
	host, _ := os.Hostname()
	wait := fmt.Sprintf("waiting for qwen: job #%d of opsbot on %s (pid %d) is changing it", first.ID, host, p1.cmd.Process.Pid)
	poll(t, time.Minute, "the second process to say whom it waits for", func() bool {
		return strings.Contains(p2.out.String(), wait)
	}, p1, p2)
	if second, ok := jobByCommand(t, st, "mtp steps 7 qwen"); !ok || second.Status != store.Queued {
		t.Fatalf("while the first job holds qwen the second is %+v, want queued", second)
	}
	for _, p := range []*opsbotProc{p1, p2} {
		if code := p.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("opsbot %v: exit %d\n%s", p.cmd.Args[3:], code, p.out.String())
		}
	}
	first, _ = st.Job(ctx, first.ID)
	second, _ := jobByCommand(t, st, "mtp steps 7 qwen")
	if first.Status != store.Succeeded || second.Status != store.Succeeded || !second.StartedAt.After(first.EndedAt) {
		t.Fatalf("jobs %+v / %+v: want both succeeded, the second started after the first ended", first, second)
	}
	// The waiting line once, then the running status once, before the steps.
	out := p2.out.String()
	running := fmt.Sprintf("#%d `mtp steps 7 qwen` — running", second.ID)
	if strings.Count(out, wait) != 1 || strings.Count(out, running) != 1 ||
		strings.Index(out, wait) > strings.Index(out, running) || (!asJSON && strings.Index(out, running) > strings.Index(out, "    ")) {
		t.Fatalf("the second process printed (want the wait, then %q once, before the steps):\n%s", running, out)
	}
	if !asJSON {
		return
	}
	var line struct {
		Job struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		} `json:"job"`
	}
	stdout := strings.TrimSpace(p2.stdout.String())
	if err := json.Unmarshal([]byte(stdout), &line); err != nil || line.Job.ID != second.ID || line.Job.Status != "succeeded" {
		t.Fatalf("stdout of run --json is not its one JSON line for job #%d (%v):\n%s", second.ID, err, stdout)
	}
}

// onEachStore runs test as parallel subtests "sqlite" (pgURL "", the
// config's own store file) and "postgres" (pgURL a new database on the test
// binary's PostgreSQL cluster; a long scenario, and skipped without
// PostgreSQL unless required).
func onEachStore(t *testing.T, test func(t *testing.T, pgURL string)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			pgURL := ""
			if driver == "postgres" {
				testrun.Long(t)
				pgtest.Skip(t)
				pgURL = pgtest.Database(t)
			}
			test(t, pgURL)
		})
	}
}
