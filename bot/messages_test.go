package bot

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// `svc logs` shows its journal lines on every platform: one preformatted
// block after the summary (fenced for chats; a terminal prints it plain).
func TestLogsResultGolden(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	v := JobView{ID: 7, Command: "svc logs qwen lines=3", User: "olga", Status: store.Succeeded, Started: t0, Ended: t0.Add(40 * time.Millisecond),
		Summary: "last 3 journal lines of sglang-qwen.service on gpu1"}
	res := &ops.Result{Summary: v.Summary, Incidents: []string{},
		Details: []string{`known cause in these lines: gpu_memory_held: "Not enough memory. Please try to increase --mem-fraction-static."`},
		Logs: []string{
			"Mar 01 03:03:58 gpu1 systemd[1]: Started sglang-qwen.service - SGLang qwen.",
			"Mar 01 03:04:01 gpu1 python3[4242]: Not enough memory. Please try to increase --mem-fraction-static.",
			"Mar 01 03:04:02 gpu1 systemd[1]: sglang-qwen.service: Main process exited, code=exited, status=1/FAILURE",
		}}
	var b strings.Builder
	b.WriteString("## chat\n" + RenderResult(v, res) + "\n")
	b.WriteString("## terminal\n" + Plain(RenderResult(v, res)) + "\n")
	golden(t, "logs", b.String())
	for _, l := range res.Logs {
		if !strings.Contains(RenderResult(v, res), l) {
			t.Errorf("the result block lacks the journal line %q", l)
		}
	}
}

// benchLoad is a benchmark's settings map as ops/bench fills it: the load.
func benchLoad(prompts, conc, in, out int) map[string]any {
	return map[string]any{"prompts": prompts, "concurrency": conc, "input_len": in, "output_len": out}
}

// A benchmark is compared like for like only: the same service, settings
// and load (prompts, concurrency, in, out). A result at another load is
// never compared ("no earlier result at this load"); at the same load, it
// stands beside the last one at the same settings and, after a change, the
// one before at other settings. History shows each result's load, and a
// result of `opsbot bench` (no job) as "opsbot bench", not "#0".
func TestComparisonsLikeForLikeGolden(t *testing.T) {
	type run struct {
		cmd     string
		tok     float64
		steps   int
		loadArg [4]int
	}
	var cur run
	h := newHarness(t, pipelineFunc(func(ctx context.Context, cmd *commands.Command, rep ops.Reporter) (*ops.Result, error) {
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
	golden(t, "compare", b.String())
	if strings.Contains(hist.Text, "#0") {
		t.Errorf("history shows a result of opsbot bench as job #0:\n%s", hist.Text)
	}
}
