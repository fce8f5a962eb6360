package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// Environment of the helper process (this test binary, re-executed).
const (
	helperModeEnv = "OPSBOT_STORE_HELPER"
	helperPathEnv = "OPSBOT_STORE_PATH"
)

// TestHelperProcess is not a test: it is the body of the child process that
// the durability tests start. Without the environment it does nothing.
func TestHelperProcess(t *testing.T) {
	t.Parallel()
	mode := os.Getenv(helperModeEnv)
	if mode == "" {
		t.Skip("helper process for the durability tests")
	}
	ctx := context.Background()
	where := Config{Path: os.Getenv(helperPathEnv)}
	if strings.HasPrefix(where.Path, "postgres://") {
		where = Config{Driver: "postgres", URL: where.Path}
	}
	s, err := OpenConfig(ctx, where)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	switch mode {
	case "crash":
		// Start a job, then write events from several goroutines until killed.
		j, err := s.CreateJob(ctx, Job{Command: "mtp steps 10 qwen", Service: "qwen"})
		if err == nil {
			err = s.StartJob(ctx, j.ID)
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		fmt.Println("job", j.ID)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					msg := strings.Repeat("x", i%2000)
					if err := s.AppendEvent(ctx, Event{JobID: j.ID, Step: "bench", Message: msg}); err != nil {
						fmt.Println("error", err)
						os.Exit(3)
					}
					if i%5 == 0 {
						if _, err := s.CreateJob(ctx, Job{Command: "filler", Result: json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`)}); err != nil {
							fmt.Println("error", err)
							os.Exit(3)
						}
					}
				}
			})
		}
		wg.Wait()
	case "write":
		// Write a fixed amount of jobs and events, concurrently with the parent.
		n, err := strconv.Atoi(os.Getenv("OPSBOT_STORE_N"))
		if err != nil || n < 10 {
			fmt.Println("error", "OPSBOT_STORE_N must be a number >= 10:", err)
			os.Exit(3)
		}
		fmt.Println("started")
		var wg sync.WaitGroup
		for g := range 10 {
			wg.Go(func() {
				for i := range n / 10 {
					j, err := s.CreateJob(ctx, Job{Command: fmt.Sprintf("child g%d i%d", g, i)})
					if err == nil {
						err = s.AppendEvent(ctx, Event{JobID: j.ID, Step: "child"})
					}
					if err != nil {
						fmt.Println("error", err)
						os.Exit(3)
					}
				}
			})
		}
		wg.Wait()
		if err := s.Close(); err != nil {
			fmt.Println("error", err)
			os.Exit(3)
		}
		fmt.Println("done")
	}
	os.Exit(0)
}

func helper(t *testing.T, mode, path string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, helperModeEnv+"="+mode, helperPathEnv+"="+path)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(out)
}

// TestCrashRecovery kills a process with SIGKILL while it writes, then
// reopens the file: it is intact, nothing committed is lost, and the job it
// was running is found and interrupted.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/crash.db"
	cmd, out := helper(t, "crash", path)
	if !out.Scan() {
		t.Fatalf("child said nothing: %v", out.Err())
	}
	var jobID int64
	if _, err := fmt.Sscanf(out.Text(), "job %d", &jobID); err != nil {
		t.Fatalf("child said %q", out.Text())
	}

	// Watch from another handle until the child is well into its write loop.
	watch := rawDB(t, path)
	var n int
	if !testkit.Poll(30*time.Second, func() bool {
		if err := watch.QueryRow(`SELECT COUNT(*) FROM job_events`).Scan(&n); err != nil {
			t.Fatalf("watching the child: %v", err)
		}
		return n >= 500
	}) {
		t.Fatalf("child wrote only %d events in 30s", n)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL (an error it printed would show above)", err)
	}
	var seen int
	if err := watch.QueryRow(`SELECT COUNT(*) FROM job_events`).Scan(&seen); err != nil {
		t.Fatalf("count events after the kill: %v", err)
	}
	if seen < 500 {
		t.Fatalf("%d events after the kill, fewer than the 500 seen before it", seen)
	}
	if err := watch.Close(); err != nil {
		t.Fatal(err)
	}

	s := openAt(t, path)
	var check string
	if err := s.rdb.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	var fk int
	if err := s.rdb.QueryRow(`SELECT COUNT(*) FROM pragma_foreign_key_check`).Scan(&fk); err != nil || fk != 0 {
		t.Errorf("foreign key violations: %d, %v", fk, err)
	}
	evs, err := s.Events(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < seen {
		t.Errorf("committed events lost: %d after reopen, %d seen before the kill", len(evs), seen)
	}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Fatalf("event %d has seq %d: the sequence has a hole", i, e.Seq)
		}
	}
	jobs, err := s.InterruptUnfinished(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, j := range jobs {
		if j.ID == jobID {
			found = j.Status == Interrupted && !j.StartedAt.IsZero()
		} else if j.Command != "filler" {
			t.Errorf("unexpected unfinished job %+v", j)
		}
	}
	if !found {
		t.Fatalf("InterruptUnfinished = %d jobs, the killed job %d not among them as interrupted", len(jobs), jobID)
	}
	if j, err := s.Job(ctx, jobID); err != nil || j.Status != Interrupted || j.Error != InterruptedMessage {
		t.Errorf("stored job = %+v, %v", j, err)
	}
	t.Logf("killed after %d events; %d survived; %d jobs interrupted", seen, len(evs), len(jobs))
}

// TestTwoProcesses writes from a child process and this one at the same time
// on one file: no call fails (no SQLITE_BUSY surfaces) and every row lands.
func testTwoProcesses(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/two.db"
	s := drv.openAt(t, path) // creates and migrates the file first
	const n = 400
	cmd, out := helper(t, "write", drv.where(t, path), fmt.Sprintf("OPSBOT_STORE_N=%d", n))
	if !out.Scan() || out.Text() != "started" {
		t.Fatalf("child: %q %v", out.Text(), out.Err())
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range 10 {
		wg.Go(func() {
			for i := range n / 10 {
				j, err := s.CreateJob(ctx, Job{Command: fmt.Sprintf("parent g%d i%d", g, i)})
				if err == nil {
					err = s.AppendEvent(ctx, Event{JobID: j.ID, Step: "parent"})
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("parent: %v", err)
	}
	var last string
	for out.Scan() {
		last = out.Text()
		if strings.HasPrefix(last, "error") {
			t.Errorf("child: %s", last)
		}
	}
	if err := cmd.Wait(); err != nil || last != "done" {
		t.Fatalf("child ended with %v, last line %q", err, last)
	}
	var jobs, evs int
	if err := s.rdb.QueryRow(`SELECT COUNT(*), (SELECT COUNT(*) FROM job_events) FROM jobs`).Scan(&jobs, &evs); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	if jobs != 2*n || evs != 2*n {
		t.Errorf("jobs %d, events %d; want %d each", jobs, evs, 2*n)
	}
}

func TestTwoProcesses(t *testing.T) { t.Parallel(); eachDriver(t, testTwoProcesses) }

// TestTwoStoresOneFile does the same with two Store values in one process.
func TestTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := openTemp(t)
	b := openAt(t, a.Path())
	var wg sync.WaitGroup
	const each = 30
	errs := make(chan error, 2*20*each)
	for g := range 20 {
		s := a
		if g%2 == 0 {
			s = b
		}
		wg.Go(func() {
			for i := range each {
				j, err := s.CreateJob(ctx, Job{Command: fmt.Sprintf("g%d i%d", g, i)})
				if err == nil {
					err = s.StartJob(ctx, j.ID)
				}
				if err == nil {
					err = s.AppendEvent(ctx, Event{JobID: j.ID})
				}
				if err == nil {
					err = s.AppendAudit(ctx, AuditEntry{User: "U", Decision: DecisionAccepted})
				}
				if err == nil {
					err = s.FinishJob(ctx, j.ID, Succeeded, "", nil)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%v", err)
	}
	if got, err := a.ListJobs(ctx, JobFilter{Active: true}); err != nil || len(got) != 0 {
		t.Errorf("%d jobs still active (%v)", len(got), err)
	}
	if n := count(t, a.rdb, "jobs"); n != 20*each {
		t.Errorf("jobs = %d, want %d", n, 20*each)
	}
}

// TestReopen writes one of everything, closes, reopens and reads it back.
func testReopen(t *testing.T, drv driver) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/sub/dir/opsbot.db"
	s, err := drv.open(t, path)
	if err != nil {
		t.Fatal(err)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	j, err := s.CreateJob(ctx, Job{Command: "mtp steps 10", User: "U1"})
	must("CreateJob", err)
	must("StartJob", s.StartJob(ctx, j.ID))
	must("AppendEvent", s.AppendEvent(ctx, Event{JobID: j.ID, Step: "stop", Status: "done"}))
	must("FinishJob", s.FinishJob(ctx, j.ID, Succeeded, "", json.RawMessage(`{"ok":true}`)))
	br, err := s.AddBenchResult(ctx, BenchResult{JobID: j.ID, Service: "qwen", Settings: "steps=10", OutputTokS: 280})
	must("AddBenchResult", err)
	sc, err := s.AddSchedule(ctx, Schedule{Spec: "@daily", Command: "bench"})
	must("AddSchedule", err)
	must("AppendAudit", s.AppendAudit(ctx, AuditEntry{User: "U1", Decision: DecisionAccepted}))
	must("SetSyncToken", s.SetSyncToken(ctx, "k", "v"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = drv.openAt(t, path)
	got, err := s.Job(ctx, j.ID)
	if err != nil || got.Status != Succeeded || string(got.Result) != `{"ok":true}` {
		t.Errorf("job after reopen: %+v, %v", got, err)
	}
	if evs, err := s.Events(ctx, j.ID); err != nil || len(evs) != 1 || evs[0].Step != "stop" {
		t.Errorf("events after reopen: %+v, %v", evs, err)
	}
	if p, err := s.PreviousBenchResult(ctx, "qwen", "steps=10", 0); err != nil || p.ID != br.ID {
		t.Errorf("bench after reopen: %+v, %v", p, err)
	}
	if got, err := s.Schedule(ctx, sc.ID); err != nil || got.Spec != "@daily" {
		t.Errorf("schedule after reopen: %+v, %v", got, err)
	}
	if a, err := s.Audit(ctx, AuditFilter{}); err != nil || len(a) != 1 {
		t.Errorf("audit after reopen: %+v, %v", a, err)
	}
	if v, err := s.SyncToken(ctx, "k"); err != nil || v != "v" {
		t.Errorf("kv after reopen: %q, %v", v, err)
	}
	if unfinished, err := s.InterruptUnfinished(ctx, nil); err != nil || len(unfinished) != 0 {
		t.Errorf("a cleanly finished job was interrupted: %+v, %v", unfinished, err)
	}
}

func TestReopen(t *testing.T) { t.Parallel(); eachDriver(t, testReopen) }
