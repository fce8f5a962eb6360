package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
