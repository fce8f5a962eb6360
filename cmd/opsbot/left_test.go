package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// The final message of a job that did not succeed says the state it left the
// service in and the command that helps next: `opsbot run` on the lab, the
// message read as the terminal prints it.

// runText runs `opsbot run --lab --yes ARGS...` in this process and returns
// its exit code and what it printed.
func runText(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := run(ctx, append([]string{"run", "--lab", "--yes"}, args...), strings.NewReader(""), &out, &out)
	return code, out.String()
}

func mustContain(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
}

// SIGTERM of `opsbot run` during `mtp steps 6` (the engine loading): the job
// is stopped as opsbot shutting down, and its final message is printed before
// the process exits, saying the service was started on the new unit and what
// to run next.
func TestSIGTERMDuringJobPrintsTheStateLeft(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, cfg, st := leaseLab(t, ctx, []lab.Fault{{Name: "slow-load", Duration: time.Hour}})
	p := startOpsbot(t, ctx, "run", "--config", cfg, "mtp steps 6 qwen", "svc status qwen")
	job := waitForStep(t, st, "mtp steps 6 qwen", "wait until ready", p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d after SIGTERM, want 1\n%s", code, p.out.String())
	}
	out := p.out.String()
	mustContain(t, out,
		"interrupted: stopping job #1;",
		"*#1 interrupted* `mtp steps 6 qwen`",
		"stopped because opsbot is shutting down",
		"now: qwen was started on the new unit (steps 6) and is still loading",
		"next: `svc status qwen` shows whether it serves (`mtp steps 3 qwen` puts steps 3 back)",
		"opsbot is shutting down") // the second command is refused, not run
	if strings.Contains(out, "context canceled") {
		t.Fatalf("the output speaks of a Go context:\n%s", out)
	}
	// Stopped by a shutdown, not by a person: interrupted, as serve records it.
	if j, _ := st.Job(ctx, job.ID); j.Status != store.Interrupted {
		t.Fatalf("job #%d: %s, want interrupted", job.ID, j.Status)
	}
}

// With --json, SIGTERM still prints the stopped job's line, its "left"
// object included.
func TestSIGTERMDuringJobJSON(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, cfg, st := leaseLab(t, ctx, []lab.Fault{{Name: "slow-load", Duration: time.Hour}})
	p := startOpsbot(t, ctx, "run", "--config", cfg, "--json", "mtp steps 6 qwen")
	waitForStep(t, st, "mtp steps 6 qwen", "wait until ready", p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d after SIGTERM, want 1\n%s", code, p.out.String())
	}
	var line struct {
		Job    struct{ Status string } `json:"job"`
		Result struct {
			Left map[string]any `json:"left"`
		} `json:"result"`
	}
	found := false
	for _, l := range strings.Split(p.out.String(), "\n") {
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &line) == nil {
			found = true
		}
	}
	if !found || line.Job.Status != "interrupted" {
		t.Fatalf("no JSON line of the interrupted job:\n%s", p.out.String())
	}
	if l := line.Result.Left; l["state"] != "starting" || l["unit"] != "new" || l["next"] != "svc status qwen" || l["undo"] != "mtp steps 3 qwen" {
		t.Fatalf("left %v", l)
	}
}

// `cancel N` from another `opsbot run` during `mtp steps 6` (slow load): the
// cancelled job's final message says where it left the service.
func TestCancelDuringLoadSaysTheStateLeft(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, cfg, st := leaseLab(t, ctx, []lab.Fault{{Name: "slow-load", Duration: time.Hour}})
	p1 := startOpsbot(t, ctx, "run", "--config", cfg, "mtp steps 6 qwen")
	job := waitForStep(t, st, "mtp steps 6 qwen", "wait until ready", p1)
	var out bytes.Buffer
	if code := run(ctx, []string{"run", "--config", cfg, fmt.Sprintf("cancel %d", job.ID)}, strings.NewReader(""), &out, &out); code != 0 {
		t.Fatalf("cancel: exit %d\n%s", code, out.String())
	}
	if code := p1.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, p1.out.String())
	}
	mustContain(t, p1.out.String(),
		"*#1 cancelled* `mtp steps 6 qwen`",
		"cancelled on request",
		"now: qwen was started on the new unit (steps 6) and is still loading",
		"next: `svc status qwen`",
		"`mtp steps 3 qwen` puts steps 3 back")
}

// Item 3's report, `run --lab --lab-unit deploy/vllm-qwen.service 'mtp steps
// 4'`: verify reads vLLM's counters (no 404 from /server_info) and the job
// succeeds; --json carries "left".
func TestRunVLLMStepsVerifies(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, lines, stderr := runJSON(t, "--lab-unit", "../../deploy/vllm-qwen.service", "mtp steps 4")
	if code != 0 || len(lines) != 1 {
		t.Fatalf("exit %d, %d lines\n%s", code, len(lines), stderr)
	}
	verified := false
	for _, e := range lines[0].Events {
		verified = verified || (e.Step == "verify" && e.Status == "done" && strings.Contains(e.Message, "num_speculative_tokens 4"))
	}
	if !verified {
		t.Fatalf("verify did not read num_speculative_tokens 4: %+v", lines[0].Events)
	}
	var raw struct {
		Result struct {
			Left map[string]any `json:"left"`
		} `json:"result"`
	}
	code, out := runJSONRaw(t, "--lab-unit", "../../deploy/vllm-qwen.service", "mtp steps 5")
	if code != 0 {
		t.Fatalf("mtp steps 5: exit %d\n%s", code, out)
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if l := raw.Result.Left; l["state"] != "serving" || l["unit"] != "new" || l["steps"] != 5.0 || l["undo"] != "mtp steps 3 qwen" {
		t.Fatalf("left %v", l)
	}
}

func runJSONRaw(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"run", "--lab", "--json", "--yes"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String() + errb.String()
}

// D state through `opsbot run`: the message names the node and the GPU the
// PID holds, says qwen is down and that only a reboot of the node helps,
// naming the services it takes down; `gpu status` afterwards advises the
// same, not `gpu recover`.
func TestRunDStateAdvisesReboot(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, out := runText(t, "--lab-faults", "dstate", "gpu recover", "gpu status")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	mustContain(t, out,
		"on pve, PID",
		"holding GPU 0 in D state",
		"qwen is down (stopped)",
		"now: qwen is stopped",
		"what helps: no signal ends a process in D state and the driver refuses a GPU reset while it holds the GPU",
		"reboot pve, which takes down coder, qwen")
	if i := strings.Index(out, "GPU memory on"); i < 0 || strings.Contains(out[i:], "`gpu recover qwen` clears it") {
		t.Fatalf("gpu status after the D state advises gpu recover (or is missing):\n%s", out)
	}
}

// A clean `mtp steps` does not alarm with memory held by no process: the
// driver releasing the stopped engine's memory is a progress line.
func TestCleanRunDoesNotAlarm(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, out := runText(t, "mtp steps 4")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if strings.Contains(out, "GPU memory still in use") || strings.Contains(out, "⚠") {
		t.Fatalf("a clean run warns:\n%s", out)
	}
	mustContain(t, out, "UTC")
}
