package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/lab"
)

// These tests run the opsbot binary's entry point end to end: the lab (simulated
// GPU host over real SSH), the config it writes, the dispatcher, the job engine,
// the SQLite store and the pipelines.

type runLine struct {
	Command string `json:"command"`
	Job     *struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	} `json:"job"`
	Events []struct {
		Step, Status, Message string
	} `json:"events"`
	Result struct {
		Unit *struct {
			Before     string   `json:"before"`
			After      string   `json:"after"`
			ArgvBefore []string `json:"argv_before"`
			ArgvAfter  []string `json:"argv_after"`
		} `json:"unit"`
		GPUs []struct {
			Index         int `json:"index"`
			UsedMiBBefore int `json:"used_mib_before"`
			UsedMiBAfter  int `json:"used_mib_after"`
		} `json:"gpus"`
		Killed []struct {
			PID     int    `json:"pid"`
			Host    string `json:"host"`
			Command string `json:"command"`
			Signal  string `json:"signal"`
		} `json:"killed"`
		Bench     map[string]any `json:"bench"`
		Logs      []string       `json:"logs"`
		Incidents []string       `json:"incidents"`
	} `json:"result"`
	Reply string  `json:"reply"`
	Error *string `json:"error"`
}

func runJSON(t *testing.T, args ...string) (int, []runLine, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"run", "--lab", "--json", "--yes"}, args...), strings.NewReader(""), &out, &errb)
	var lines []runLine
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var rl runLine
		if err := json.Unmarshal([]byte(l), &rl); err != nil {
			t.Fatalf("output line is not JSON: %q (%v)\nstderr: %s", l, err, errb.String())
		}
		lines = append(lines, rl)
	}
	return code, lines, errb.String()
}

// The incident replayed through `opsbot run`: the job succeeds, reaps the
// orphans from the Proxmox node, and the unit changes only at steps and draft tokens.
func TestRunIncidentJSON(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, lines, stderr := runJSON(t, "--lab-faults", "orphans", "/mtp steps 10", "/gpu status", "/mtp show", "/svc logs lines=5")
	if code != 0 || len(lines) != 4 {
		t.Fatalf("exit %d, %d lines; stderr:\n%s", code, len(lines), stderr)
	}
	m := lines[0]
	if m.Job == nil || m.Job.Status != "succeeded" || m.Error != nil {
		t.Fatalf("mtp steps 10: %+v", m)
	}
	if !slices.Contains(m.Result.Incidents, "gpu_memory_held") {
		t.Fatalf("incidents %v", m.Result.Incidents)
	}
	if m.Result.Unit == nil || !strings.Contains(m.Result.Unit.After, "--speculative-num-steps 10") ||
		!strings.Contains(m.Result.Unit.After, "--speculative-num-draft-tokens 11") {
		t.Fatalf("unit after: %+v", m.Result.Unit)
	}
	changed := 0
	for i := range m.Result.Unit.ArgvBefore {
		if m.Result.Unit.ArgvBefore[i] != m.Result.Unit.ArgvAfter[i] {
			changed++
		}
	}
	if changed != 2 || len(m.Result.Killed) == 0 || len(m.Result.GPUs) != 4 {
		t.Fatalf("argv words changed %d (want 2), killed %v, gpus %v", changed, m.Result.Killed, m.Result.GPUs)
	}
	if v, _ := m.Result.Bench["output_tok_s"].(float64); v <= 0 {
		t.Fatalf("bench %v", m.Result.Bench)
	}
	if len(m.Events) < 5 {
		t.Fatalf("events %+v", m.Events)
	}
	if lines[3].Job.Status != "succeeded" || len(lines[3].Result.Logs) != 5 {
		t.Fatalf("svc logs: %+v", lines[3])
	}
}

func TestRunCrashOnStartRollsBack(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, lines, stderr := runJSON(t, "--lab-faults", "crash-on-start", "mtp steps 10")
	if code != 1 || len(lines) != 1 {
		t.Fatalf("exit %d (want 1), lines %d; stderr:\n%s", code, len(lines), stderr)
	}
	l := lines[0]
	if l.Job.Status != "failed" || l.Error == nil || !slices.Contains(l.Result.Incidents, "rolled_back") {
		t.Fatalf("%+v", l)
	}
	if !strings.Contains(*l.Error, "restored the previous unit") {
		t.Fatalf("error does not say what happened: %s", *l.Error)
	}
}

// A unit whose engine crashes at start and whose Restart= waits long
// (RestartSec=1h) is seen at its first crash: the job says it crashed while
// starting, before any automatic restart, not that it loops, and rolls back
// without waiting for systemd's restart.
func TestRunCrashBeforeAnyAutomaticRestart(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	unit := writeFile(t, filepath.Join(t.TempDir(), "qwen.service"),
		strings.Replace(lab.DefaultUnit("sglang"), "\nRestartSec=5\n", "\nRestartSec=1h\n", 1))
	code, lines, stderr := runJSON(t, "--lab-faults", "crash-on-start", "--lab-unit", unit, "mtp steps 10")
	if code != 1 || len(lines) != 1 || lines[0].Error == nil {
		t.Fatalf("exit %d (want 1), lines %d; stderr:\n%s", code, len(lines), stderr)
	}
	l := lines[0]
	const want = "sglang-qwen.service crashed while starting (activating/auto-restart, before any automatic restart)"
	if !strings.Contains(*l.Error, want) || strings.Contains(*l.Error, "restart loop") || !slices.Contains(l.Result.Incidents, "rolled_back") {
		t.Fatalf("error %q (incidents %v), want %q and a rollback", *l.Error, l.Result.Incidents, want)
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	for _, cmd := range []string{"mtp steps 10; rm -rf /", "mtp steps $(reboot)", "mtp steps 99", "frobnicate"} {
		code, lines, stderr := runJSON(t, cmd)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage); lines %+v stderr %s", cmd, code, lines, stderr)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run"}, strings.NewReader(""), &out, &errb); code != 2 {
		t.Errorf("run without commands: exit %d", code)
	}
}

// `opsbot demo` reads commands from its input; at the end of the input the jobs
// it started still finish. The lab's default_service makes `mtp show` mean
// qwen; `gpu status` shows the whole node (both services' hosts).
func TestDemoFinishesJobsAtEndOfInput(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"demo"}, strings.NewReader("mtp show\ngpu status\n"), &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	for _, want := range []string{"✅ #1 `mtp show qwen` — succeeded", "✅ #2 `gpu status` — succeeded"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	// Its input is no terminal: no prompt trails the output.
	if strings.Contains(out.String(), "> ") {
		t.Errorf("a prompt in the output of piped input:\n%s", out.String())
	}
}

// `opsbot lab --config-out FILE` runs the lab standalone and writes a config
// that `opsbot config check` accepts and `opsbot run --config` acts through.
func TestLabStandaloneConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := dir + "/lab.yaml"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var labOut testkit.Buffer
	go func() {
		done <- run(ctx, []string{"lab", "--config-out", cfg}, strings.NewReader(""), &labOut, &labOut)
	}()
	exited, code := false, 0
	if !testkit.Poll(30*time.Second, func() bool {
		if strings.Contains(labOut.String(), "lab running") {
			return true
		}
		select {
		case code = <-done:
			exited = true
		default:
		}
		return exited
	}) {
		t.Fatalf("lab did not start:\n%s", labOut.String())
	}
	if exited {
		t.Fatalf("lab exited %d:\n%s", code, labOut.String())
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"config", "check", "--config", cfg}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("config check: exit %d %s", code, errb.String())
	}
	out.Reset()
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if code := run(rctx, []string{"run", "--config", cfg, "--json", "svc status"}, strings.NewReader(""), &out, &errb); code != 0 ||
		!strings.Contains(out.String(), `"succeeded"`) {
		t.Fatalf("run against the standalone lab: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("lab exit %d after Ctrl-C", code)
	}
}

// A stop with orphans leaves GPU memory held; `gpu recover` (confirmed with
// --yes) kills the holders from the Proxmox node and starts the service fresh.
func TestRunStopThenRecover(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, lines, stderr := runJSON(t, "--lab-faults", "orphans", "svc stop", "gpu recover")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("exit %d, %d lines; stderr:\n%s", code, len(lines), stderr)
	}
	stop, rec := lines[0], lines[1]
	if stop.Job.Status != "succeeded" || !slices.Contains(stop.Result.Incidents, "gpu_memory_held") {
		t.Fatalf("svc stop: %+v", stop)
	}
	if rec.Job.Status != "succeeded" || len(rec.Result.Killed) != 4 {
		t.Fatalf("gpu recover: %+v", rec)
	}
	for _, k := range rec.Result.Killed {
		if k.Host != "pve" || !strings.HasPrefix(k.Command, "sglang::scheduler") {
			t.Errorf("killed %+v: want the orphaned schedulers, from the Proxmox node", k)
		}
	}
	for _, g := range rec.Result.GPUs {
		if g.UsedMiBBefore < 1024 || g.UsedMiBAfter >= 1024 {
			t.Errorf("GPU %d: %d -> %d MiB, want held, then clear", g.Index, g.UsedMiBBefore, g.UsedMiBAfter)
		}
	}
}

// A benchmark's result is in the history and its job in the job list.
func TestRunBenchThenHistory(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	code, lines, stderr := runJSON(t, "bench", "history", "jobs all")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("exit %d, %d lines; stderr:\n%s", code, len(lines), stderr)
	}
	tok, _ := lines[0].Result.Bench["output_tok_s"].(float64)
	if tok <= 0 || !strings.Contains(lines[1].Reply, fmt.Sprintf("%.1f", tok)) || !strings.Contains(lines[1].Reply, "steps=3,topk=1,draft=4") {
		t.Fatalf("history %q does not show the result (%.1f tok/s)", lines[1].Reply, tok)
	}
	if !strings.Contains(lines[2].Reply, "#1 `bench qwen` succeeded") {
		t.Fatalf("jobs all: %q", lines[2].Reply)
	}
}

// The JSON of a sweep: each point keeps its benchmark under
// result.points[].bench, with the same field names as result.bench and
// without the per-request rows; its chart is saved in --chart-dir and
// chart_path names the file.
func TestRunSweepJSON(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	charts := t.TempDir()
	code := run(ctx, []string{"run", "--lab", "--json", "--chart-dir", charts, "sweep steps 2,4", "bench"}, strings.NewReader(""), &out, &errb)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("exit %d, %d lines\n%s\n%s", code, len(lines), out.String(), errb.String())
	}
	var sweep struct {
		ChartPath string `json:"chart_path"`
		Result    struct {
			Points []struct {
				Steps int            `json:"steps"`
				OK    bool           `json:"ok"`
				Tok   float64        `json:"output_tok_s"`
				Bench map[string]any `json:"bench"`
			} `json:"points"`
			Best *struct {
				Steps int `json:"steps"`
			} `json:"best"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &sweep); err != nil {
		t.Fatal(err)
	}
	var bench struct {
		Result struct {
			Bench map[string]any `json:"bench"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &bench); err != nil {
		t.Fatal(err)
	}
	if len(sweep.Result.Points) != 2 || sweep.Result.Best == nil {
		t.Fatalf("sweep result %+v", sweep.Result)
	}
	for _, p := range sweep.Result.Points {
		if v, _ := p.Bench["output_tok_s"].(float64); !p.OK || v <= 0 || v != p.Tok {
			t.Errorf("point %d: ok %v, output_tok_s %v in bench, %v on the point", p.Steps, p.OK, p.Bench["output_tok_s"], p.Tok)
		}
		for _, k := range []string{"per_stream_tok_s", "accept_len", "accept_rate", "requests_ok", "settings", "ttft_ms", "concurrency"} {
			if _, ok := p.Bench[k]; !ok {
				t.Errorf("point %d: bench lacks %q", p.Steps, k)
			}
		}
		if _, ok := p.Bench["requests"]; ok {
			t.Errorf("point %d: bench carries the per-request rows", p.Steps)
		}
		if len(p.Bench) != len(bench.Result.Bench) {
			t.Errorf("point %d: bench has %d fields, result.bench of a bench job %d", p.Steps, len(p.Bench), len(bench.Result.Bench))
		}
	}
	if _, ok := bench.Result.Bench["requests"]; ok {
		t.Error("result.bench carries the per-request rows")
	}
	checkChartFile(t, charts, sweep.ChartPath, 1)
	if strings.Contains(lines[1], "chart_path") {
		t.Errorf("a bench makes no chart, its line has a chart_path: %s", lines[1])
	}
}

// checkChartFile checks that path is job's chart, saved in dir: a PNG of the
// chart's size, the only file there.
func checkChartFile(t *testing.T, dir, path string, job int) {
	t.Helper()
	if ok, _ := filepath.Match(filepath.Join(dir, fmt.Sprintf("chart-job-%d-*.png", job)), path); !ok {
		t.Fatalf("chart saved as %q, want chart-job-%d-....png in %s", path, job, dir)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != 1200 || cfg.Height != 900 {
		t.Errorf("chart %s: %dx%d %v, want a 1200x900 PNG", path, cfg.Width, cfg.Height, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the chart directory, want the chart alone: %v", len(ents), ents)
	}
}

// In a terminal a sweep's chart is saved in --chart-dir and its path
// printed in the thread, where a chat shows the image.
func TestRunSavesTheChart(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	charts := t.TempDir()
	code, out, errs := runArgs(t, "run", "--lab", "--chart-dir", charts, "sweep steps 2,3")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	m := regexp.MustCompile(`(?m)^ +chart: (.+)$`).FindStringSubmatch(out)
	if m == nil || strings.Contains(out, "[image") {
		t.Fatalf("no chart line in the thread:\n%s", out)
	}
	checkChartFile(t, charts, m[1], 1)
}

// A chart directory that cannot take a chart is refused before anything
// runs: exit 2, the directory and why on stderr, nothing on stdout.
func TestRunRefusesAnUnwritableChartDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"run", "--lab", "--json", "mtp steps 4", "--chart-dir", file}, file + ": it is not a directory"},
		{[]string{"demo", "--chart-dir", file}, file + ": it is not a directory"},
		{[]string{"run", "--lab", "--chart-dir", filepath.Join(file, "charts"), "mtp steps 4"}, filepath.Join(file, "charts") + ": "},
	} {
		code, out, errs := runArgs(t, tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, "charts cannot be saved in "+tc.says) ||
			!strings.Contains(errs, "nothing was run") || strings.Contains(errs, "pass --chart-dir") {
			t.Errorf("%q: exit %d\nstdout: %s\nstderr: %s", tc.args, code, out, errs)
		}
	}
}

// A --chart-dir that does not exist yet is created (README's "Try it"
// names one a fresh clone lacks), and the run goes on.
func TestRunCreatesAMissingChartDir(t *testing.T) {
	t.Parallel()
	charts := filepath.Join(t.TempDir(), "charts", "today")
	code, out, errs := runArgs(t, "run", "--lab", "--chart-dir", charts, "jobs")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if fi, err := os.Stat(charts); err != nil || !fi.IsDir() {
		t.Fatalf("--chart-dir %s not created: %v", charts, err)
	}
}

// TestRunWithoutTerminalShowsWhatYesConfirms: a command that asks for
// confirmation, run with no terminal to ask and no --yes, is refused,
// changes nothing, and prints what --yes would have confirmed (its
// preview), not the chat's `confirm TOKEN` instructions.
func TestRunWithoutTerminalShowsWhatYesConfirms(t *testing.T) {
	testrun.Long(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "--lab", "gpu recover"}, strings.NewReader(""), &out, &errb)
	text := out.String() + errb.String()
	if code == 0 {
		t.Fatalf("exit 0 for an unconfirmed gpu recover:\n%s", text)
	}
	for _, want := range []string{"rerun with --yes to confirm this:", "`gpu recover qwen` will stop qwen on gpu1"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "confirm ") && strings.Contains(text, "within") {
		t.Errorf("output tells a terminal user to reply `confirm TOKEN`:\n%s", text)
	}
}
