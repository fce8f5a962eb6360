package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// `svc logs` shows its journal lines on every platform: one preformatted
// block after the summary (fenced for chats; a terminal prints it plain).
func TestLogsResultGolden(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	v := report.JobView{ID: 7, Command: "svc logs qwen lines=3", User: "olga", Status: store.Succeeded, Started: t0, Ended: t0.Add(40 * time.Millisecond),
		Summary: "last 3 journal lines of sglang-qwen.service on gpu1"}
	res := &ops.Result{Summary: v.Summary, Incidents: []string{},
		Details: []string{`known cause in these lines: gpu_memory_held: "Not enough memory. Please try to increase --mem-fraction-static."`},
		Logs: []string{
			"Mar 01 03:03:58 gpu1 systemd[1]: Started sglang-qwen.service - SGLang qwen.",
			"Mar 01 03:04:01 gpu1 python3[4242]: Not enough memory. Please try to increase --mem-fraction-static.",
			"Mar 01 03:04:02 gpu1 systemd[1]: sglang-qwen.service: Main process exited, code=exited, status=1/FAILURE",
		}}
	var b strings.Builder
	b.WriteString("## chat\n" + report.RenderResult(v, res) + "\n")
	b.WriteString("## terminal\n" + report.Plain(report.RenderResult(v, res)) + "\n")
	testkit.Golden(t, "logs.golden", b.String())
	for _, l := range res.Logs {
		if !strings.Contains(report.RenderResult(v, res), l) {
			t.Errorf("the result block lacks the journal line %q", l)
		}
	}
}

// benchLoad is a benchmark's settings map as ops/bench fills it: the load.
func benchLoad(prompts, conc, in, out int) bench.Settings {
	return bench.Settings{Prompts: prompts, Concurrency: conc, InputLen: in, OutputLen: out}
}

// A benchmark is compared like for like only: the same service, settings
// and load (prompts, concurrency, in, out). A result at another load is
// never compared ("no earlier result at this load"); at the same load, it
// stands beside the last one at the same settings and, after a change, the
// one before at other settings. History shows each result's load, and a
// result of `opsbot bench` (no job) as "opsbot bench", not "#0".
func TestComparisonsLikeForLikeGolden(t *testing.T) {
	t.Parallel()
	type run struct {
		cmd     string
		tok     float64
		steps   int
		loadArg [4]int
	}
	var cur run
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		l := cur.loadArg
		b := &ops.BenchResult{OutputTokS: cur.tok, AcceptLen: 3.1, RequestsOK: l[0], Concurrency: l[1], Settings: benchLoad(l[0], l[1], l[2], l[3])}
		return &ops.Result{Bench: b, Spec: &ops.Spec{Engine: "sglang", Steps: cur.steps, TopK: 1, DraftTokens: cur.steps + 1}}, nil
	}), roles)
	ctx := context.Background()
	// A result of `opsbot bench` from the command line: no job.
	if _, err := h.store.AddBenchResult(ctx, store.BenchResult{Service: "qwen", Settings: "steps=3,topk=1,draft=4", OutputTokS: 240,
		AcceptLen: 3, Prompts: 16, Concurrency: 1, InputLen: 256, OutputLen: 256, At: time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	small, big := [4]int{16, 1, 256, 256}, [4]int{100, 8, 512, 256}
	var b strings.Builder
	dateless := func(s string) string {
		// Stored times are now: keep the golden file stable.
		return regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d`).ReplaceAllString(s, "DATE")
	}
	for _, r := range []run{
		{"bench qwen", 250, 3, small},                                 // beside the opsbot bench result
		{"bench qwen prompts=100 concurrency=8 in=512", 1500, 3, big}, // another load: never compared
		{"mtp steps 10 qwen", 280, 10, small},                         // other settings, same load
		{"bench qwen", 282, 10, small},                                // same settings and load
	} {
		cur = r
		j := h.wait(h.handle("olga", r.cmd).JobID)
		var res ops.Result
		if err := json.Unmarshal(j.Result, &res); err != nil {
			t.Fatal(err)
		}
		b.WriteString("## " + r.cmd + "\n" + dateless(strings.Join(res.Details, "\n")) + "\n")
	}
	hist := h.handle("vic", "history qwen")
	b.WriteString("## history\n" + dateless(hist.Text) + "\n")
	testkit.Golden(t, "compare.golden", b.String())
	if strings.Contains(hist.Text, "#0") {
		t.Errorf("history shows a result of opsbot bench as job #0:\n%s", hist.Text)
	}
}

// stable replaces what changes from run to run in a rendered job (dates,
// times of day, durations) so it can be compared with a golden file.
func stable(s string) string {
	s = regexp.MustCompile(`\d{4}-\d\d-\d\d`).ReplaceAllString(s, "DATE")
	s = regexp.MustCompile(`\d\d:\d\d:\d\d`).ReplaceAllString(s, "TIME")
	return regexp.MustCompile(` in [0-9.]+(µs|ms|s)`).ReplaceAllString(s, " in DUR")
}

// `job N` shows one job in full: who asked and who confirmed it, its steps
// with their times, its result and the unit diff it applied. `mtp undo`
// needs the operator role and a confirmation whose preview says what it does.
func TestJobAndUndoGolden(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	diff := "--- a/etc/systemd/system/sglang-qwen.service\n+++ b/etc/systemd/system/sglang-qwen.service\n@@ -3,2 +3,2 @@\n" +
		"-    --speculative-num-steps 3 \\\n+    --speculative-num-steps 10 \\\n"
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		rep.Report(ops.Event{At: t0, Step: "stop", Status: ops.StepStarted, Message: "stopping sglang-qwen.service on gpu1"})
		rep.Report(ops.Event{At: t0.Add(2 * time.Second), Step: "stop", Status: ops.StepDone, Message: "inactive"})
		rep.Report(ops.Event{At: t0.Add(40 * time.Second), Step: "benchmark", Status: ops.StepDone, Message: "281.3 tok/s"})
		return &ops.Result{Summary: "undid #1 on qwen: steps 10 -> 3: 281.3 tok/s", Incidents: []string{},
			Unit: &ops.UnitChange{Path: "/etc/systemd/system/sglang-qwen.service", Before: "b", After: "a", Diff: diff}}, nil
	}), roles)
	var b strings.Builder
	add := func(title string, r Reply) { b.WriteString("## " + title + "\n" + stable(renderReply(r)) + "\n") }
	add("mtp undo by a viewer", h.handle("vic", "mtp undo qwen"))
	add("mtp undo with nothing to undo", h.handle("olga", "mtp undo qwen"))
	// A change to undo: the backend records one for every job.
	first := h.handle("olga", "mtp steps 10 qwen")
	if first.Outcome != Queued {
		t.Fatalf("mtp steps 10: %+v", first)
	}
	h.wait(first.JobID)
	ask := h.handle("olga", "mtp undo qwen")
	add("mtp undo asks for confirmation", ask)
	a, ok := ask.Action(ActConfirm)
	if !ok {
		t.Fatalf("mtp undo offers no Confirm: %+v", ask)
	}
	q := h.act("olga", a.ID)
	if q.Outcome != Queued {
		t.Fatalf("confirm: %+v", q)
	}
	h.wait(q.JobID)
	add("job N", h.handle("vic", fmt.Sprintf("job %d", q.JobID)))
	add("job N that does not exist", h.handle("vic", "job 999"))
	testkit.Golden(t, "job.golden", b.String())

	full := h.handle("vic", fmt.Sprintf("job #%d", q.JobID)).Text
	for _, want := range []string{"asked by test:olga", "confirmed by test:olga", "TIME UTC ▶ stop", "the unit diff it applied", "+    --speculative-num-steps 10"} {
		if !strings.Contains(stable(full), want) {
			t.Errorf("job view lacks %q:\n%s", want, full)
		}
	}
}

// A detail of several lines (gpu status's tables, a dry run's diff, a
// sweep's table) is one preformatted block: fenced for chats, where
// proportional fonts would break its columns; plain in a terminal.
func TestTableDetailsGolden(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	v := report.JobView{ID: 9, Command: "gpu status", Status: store.Succeeded, Started: t0, Ended: t0.Add(11 * time.Millisecond), Summary: "GPU memory on pve"}
	table := "pve: services qwen (sglang-qwen.service on gpu1)\n" +
		"GPU  USED MiB  TOTAL MiB  SERVICE  HELD BY (PID)\n" +
		"0    74371     81559      qwen     1029\n" +
		"1    0         81559      qwen     -\n\n" +
		"PID   GPU  MiB    KIND    STATE  WHOSE                             COMMAND\n" +
		"1005  -    -      daemon  S      GPU daemon (never touched)        nvidia-persistenced\n" +
		"1029  0    74371  engine  R      qwen's: unit sglang-qwen.service  sglang::scheduler_TP0"
	res := &ops.Result{Summary: v.Summary, Incidents: []string{ops.IncidentGPUMemoryHeld},
		Details: []string{table, "sglang-qwen.service is stopped but its GPUs hold memory: `gpu recover qwen` clears it"}}
	testkit.Golden(t, "gpu_status.golden", "## chat\n"+report.RenderResult(v, res)+"\n## terminal\n"+report.Plain(report.RenderResult(v, res))+"\n")
}
