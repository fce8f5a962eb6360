package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/store"
)

// jobLine is a --json line with the jobs it carries.
type jobLine struct {
	Command string   `json:"command"`
	Job     *jsonJob `json:"job"`
	Events  []struct {
		Step string `json:"step"`
	} `json:"events"`
	Reply   string     `json:"reply"`
	Error   *string    `json:"error"`
	Jobs    *[]jsonJob `json:"jobs"`
	Omitted *int       `json:"omitted"`
}

type jsonJob struct {
	ID      int64           `json:"id"`
	Status  string          `json:"status"`
	Command string          `json:"command"`
	Created *time.Time      `json:"created_at"`
	Started *time.Time      `json:"started_at"`
	Ended   *time.Time      `json:"ended_at"`
	Result  json.RawMessage `json:"result"`
}

// A command about a job carries that job in its JSON (id, status, command,
// times, result, and its steps as events); `jobs all` carries the list and
// how many it left out. `job 1` of a job that does not exist is no usage
// error: the commands after it still run, and the exit code is 1.
func TestRunJobJSONAndExitCodes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "--lab", "--json", "job 1", "history", "mtp show", "job 1", "jobs all"}, strings.NewReader(""), &out, &errb)
	var lines []jobLine
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var jl jobLine
		if err := json.Unmarshal([]byte(l), &jl); err != nil {
			t.Fatalf("not JSON: %q (%v)\nstderr: %s", l, err, errb.String())
		}
		lines = append(lines, jl)
	}
	if code != 1 || len(lines) != 5 {
		t.Fatalf("exit %d (want 1: job 1 did not exist at first), %d lines (want 5: every command ran)\n%s\nstderr: %s", code, len(lines), out.String(), errb.String())
	}
	if l := lines[0]; l.Job != nil || l.Error == nil || !strings.Contains(*l.Error, "there is no job #1") {
		t.Errorf("job 1 before any job: %+v", l)
	}
	if l := lines[1]; l.Error != nil || l.Reply == "" {
		t.Errorf("history: %+v", l)
	}
	if l := lines[2]; l.Job == nil || l.Job.ID != 1 || l.Job.Status != "succeeded" || l.Job.Command != "mtp show qwen" {
		t.Errorf("mtp show: %+v", l.Job)
	}
	j := lines[3].Job
	if j == nil || j.ID != 1 || j.Status != "succeeded" || j.Command != "mtp show qwen" || j.Created == nil || j.Started == nil ||
		j.Ended == nil || j.Ended.Before(*j.Started) || len(j.Result) < 3 || len(lines[3].Events) == 0 {
		t.Errorf("job 1: %+v (events %d)\n%s", j, len(lines[3].Events), out.String())
	}
	if l := lines[4]; l.Job != nil || l.Jobs == nil || len(*l.Jobs) != 1 || (*l.Jobs)[0].ID != 1 || (*l.Jobs)[0].Command != "mtp show qwen" ||
		l.Omitted == nil || *l.Omitted != 0 {
		t.Errorf("jobs all: %+v", l)
	}
}

// `opsbot run --lab 'help'` answers without booting the lab: a lab that
// could not boot (its unit file does not exist) is never tried.
func TestRunLabHelpDoesNotBootTheLab(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such.service")
	code, out, errs := runArgs(t, "run", "--lab", "--lab-unit", missing, "help", "help mtp tune")
	if code != 0 || !strings.Contains(out, "mtp tune") || strings.Contains(errs, "no-such.service") {
		t.Errorf("exit %d, want 0 with the help; stdout:\n%s\nstderr: %s", code, out, errs)
	}
	// A command that needs the lab does boot it (and so meets the missing file).
	if code, _, errs := runArgs(t, "run", "--lab", "--lab-unit", missing, "help", "gpu status"); code == 0 || !strings.Contains(errs, "no-such.service") {
		t.Errorf("gpu status with a missing lab unit: exit %d, stderr %s", code, errs)
	}
}

// In the demo, `y` confirms the one command waiting for confirmation, and
// `quit` ends the demo only once the job it started has finished (never
// interrupting it); lines after `quit` are not run.
func TestDemoYesConfirmsAndQuitWaits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"demo"}, strings.NewReader("svc stop coder\ny\nquit\nmtp show\n"), &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	o := out.String()
	if !strings.Contains(o, "`y` confirms it here.") {
		t.Errorf("the preview does not say that y confirms it:\n%s", o)
	}
	if !strings.Contains(o, "✅ #1 `svc stop coder` — succeeded") || strings.Contains(o, "interrupted") || strings.Contains(o, "unknown command") {
		t.Errorf("demo output: want svc stop coder confirmed by y and finished before quitting:\n%s", o)
	}
	if strings.Contains(o, "#2") {
		t.Errorf("a line after quit ran:\n%s", o)
	}
}

// startRunOnCutStore starts `opsbot run --config C --lab ... 'mtp steps 8'`
// (extra flags before the command) on a PostgreSQL store reached through a
// proxy, cuts the proxy once the store has the job's step waiting for its
// engine to load (slow load), so the job winds down and its end is
// refused, and returns once the run says it waits for the store. st is the
// database, reached without the proxy. The run's exit code comes on done;
// cancel is its Ctrl-C.
func startRunOnCutStore(t *testing.T, extra ...string) (proxy *pgtest.Proxy, st *store.Store, cfg string, stdout, stderr *testkit.Buffer, done chan int, cancel func()) {
	t.Helper()
	db := pgtest.Database(t)
	proxy, url := pgtest.NewProxy(t, db)
	cfg = writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"),
		"store: {driver: postgres, url: \""+url+"\"}\nlimits: {lease_ttl: 15s}\n")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stdout, stderr, done = &testkit.Buffer{}, &testkit.Buffer{}, make(chan int, 1)
	args := append([]string{"run", "--config", cfg, "--lab", "--lab-faults", "slow-load=1m"}, extra...)
	go func() { done <- run(ctx, append(args, "mtp steps 8"), strings.NewReader(""), stdout, stderr) }()
	testkit.WaitFor(t, 2*time.Minute, "the database opens", func() bool {
		var err error
		st, err = store.OpenPostgres(context.Background(), db, 0)
		return err == nil
	})
	t.Cleanup(func() { st.Close() })
	testkit.WaitFor(t, 2*time.Minute, "the job waits until its engine is ready", func() bool {
		evs, _ := st.Events(context.Background(), 1)
		return len(evs) > 0 && evs[len(evs)-1].Step == "wait until ready"
	})
	proxy.Cut()
	exited := -1
	testkit.WaitFor(t, 2*time.Minute, "the run waits for the store to take the job's record (or exits)", func() bool {
		select {
		case exited = <-done:
			return true
		default:
		}
		return strings.Contains(stderr.String(), "waiting up to 5m0s for the store to take it (Ctrl-C gives up)")
	})
	if exited >= 0 {
		t.Fatalf("the run exited %d instead of waiting for its record\nstdout:\n%s\nstderr:\n%s", exited, stdout, stderr)
	}
	return proxy, st, cfg, stdout, stderr, done, cancel
}

// `opsbot run` whose store goes away mid-job: the job winds down (the
// host is left serving the new unit, the benchmark skipped) and its end is
// refused; the run does not exit but waits for the store, and once the
// store is back the job is recorded (failed, naming the store, ended when
// it ended), its final line printed, and the run exits with the job's
// code, 1.
func TestRunWaitsForItsRecord(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	pgtest.Skip(t)
	proxy, st, _, stdout, stderr, done, _ := startRunOnCutStore(t)
	back := time.Now()
	proxy.Restore()
	var code int
	select {
	case code = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the run still waits two minutes after the store came back\nstderr:\n%s", stderr)
	}
	if code != 1 || !strings.Contains(stderr.String(), "opsbot: the store took job #1's record") ||
		!strings.Contains(stdout.String(), "#1 `mtp steps 8 qwen` — failed") {
		t.Fatalf("exit %d (want 1, the job failed); stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	j, err := st.Job(context.Background(), 1)
	if err != nil || j.Status != store.Failed || !strings.Contains(j.Error, "benchmark skipped: opsbot's store refuses writes") ||
		!j.EndedAt.Before(back) {
		t.Errorf("recorded %+v, %v; want failed, benchmark skipped naming the store, ended before the store came back (%s)", j, err, back)
	}
}

// `opsbot run` whose store refuses the job's record, given up with Ctrl-C:
// it prints the outcome (--json: the job as it ended on its host, and why
// it is not recorded) and exits 3, done on the host but not recorded. The
// next opsbot process on the store, once the run's registration expired,
// records the job interrupted with what the store knows: the last step it
// recorded and what that means for the host.
func TestRunGivesUpItsRecordOnCtrlC(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	pgtest.Skip(t)
	proxy, st, cfg, stdout, stderr, done, cancel := startRunOnCutStore(t, "--json")
	cancel()
	var code int
	select {
	case code = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the run did not end after Ctrl-C\nstderr:\n%s", stderr)
	}
	var line struct {
		Job struct {
			Status string `json:"status"`
		} `json:"job"`
		Error      *string `json:"error"`
		Unrecorded string  `json:"unrecorded"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout.String())), &line); err != nil {
		t.Fatalf("stdout is not one JSON line: %v\n%s", err, stdout)
	}
	if code != 3 || line.Job.Status != "failed" || line.Error == nil || !strings.Contains(*line.Error, "benchmark skipped") ||
		!strings.Contains(line.Unrecorded, "opsbot stopped before its store took the job's record") {
		t.Fatalf("exit %d (want 3); stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	proxy.Restore()
	testkit.WaitFor(t, time.Minute, "the stopped run's registration expires", func() bool {
		_, live, err := st.JobOwner(context.Background(), 1)
		return err == nil && !live
	})
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--config", cfg, "--lab", "--json", "job 1"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("job 1 in the next run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	j, err := st.Job(context.Background(), 1)
	if err != nil || j.Status != store.Interrupted || !strings.Contains(j.Error, "last seen: wait until ready") ||
		!strings.HasSuffix(j.Error, "the host may run the new unit: `svc status qwen`") {
		t.Errorf("the next run recorded %s %q, %v; want interrupted, last seen waiting until ready, the host may run the new unit", j.Status, j.Error, err)
	}
}
