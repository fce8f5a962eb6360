package bot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// An applied per-load form on the lab, through the bot: its report is one
// table naming what ran at each load (not the unit's starting steps on
// every row), each load beside what ran there before (another job's
// result, never this job's own), a chart by concurrency; and history lists
// each of its benchmarks once.
func TestPerLoadAppliedReportOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	_, rb := labRunbook(t)
	h := newHarness(t, jobs.RunbookBackend(rb), roles)
	before := h.wait(h.handle("olga", "bench qwen concurrency=8 prompts=8").JobID)
	if before.Status != store.Succeeded {
		t.Fatalf("bench: %s %s", before.Status, before.Error)
	}
	ask := h.handle("olga", "mtp per-load qwen 1:7 8:5/4")
	a, ok := ask.Action(ActConfirm)
	if !ok {
		t.Fatalf("mtp per-load offers no Confirm: %+v", ask)
	}
	q := h.act("olga", a.ID)
	j := h.wait(q.JobID)
	if j.Status != store.Succeeded {
		t.Fatalf("mtp per-load: %s %s", j.Status, j.Error)
	}
	_, replies := h.chat.Thread(j.Thread)
	var m Message
	for _, r := range replies {
		if r.Kind == KindResult {
			m = r
		}
	}
	text := m.Text
	for _, want := range []string{"per load, at each concurrency:", "steps 7", fmt.Sprintf(", #%d) at steps=3,topk=1,draft=4", before.ID), "none at this load"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, fmt.Sprintf("#%d)", j.ID)) {
		t.Errorf("the report compares job #%d with itself:\n%s", j.ID, text)
	}
	if m.Image == nil {
		t.Fatal("no chart")
	}
	if _, err := png.Decode(bytes.NewReader(m.Image.PNG)); err != nil {
		t.Fatalf("chart: %v", err)
	}
	hist, err := h.store.BenchHistory(context.Background(), "qwen", 10)
	if err != nil {
		t.Fatal(err)
	}
	mine := map[int]int{}
	for _, r := range hist {
		if r.JobID == j.ID {
			mine[r.Concurrency]++
		}
	}
	if len(mine) != 2 || mine[1] != 1 || mine[8] != 1 {
		t.Errorf("history holds job #%d's benchmarks %v times by concurrency, want each of 1 and 8 once:\n%+v", j.ID, mine, hist)
	}
	t.Logf("%s", text)
}

// A pipeline whose result's benchmark is also one of its points (as an
// applied per-load form's was: its last load's) stores it once: history
// lists each run once, and no point is compared with this job's own row.
func TestBenchOfAPointStoredOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		spec := &ops.Spec{Engine: "sglang", Steps: 3, TopK: 1, DraftTokens: 4}
		res := &ops.Result{Spec: spec}
		for _, c := range []int{1, 8} {
			b := &ops.BenchResult{OutputTokS: 100 * float64(c), AcceptLen: 3, RequestsOK: 8, Settings: benchLoad(8, c, 256, 256)}
			res.Points = append(res.Points, ops.SweepPoint{Steps: 3, Concurrency: c, OK: true, OutputTokS: b.OutputTokS, AcceptLen: 3, Bench: b, Spec: spec})
			res.Bench = b
		}
		return res, nil
	}), roles)
	j := h.wait(h.handle("olga", "bench qwen").JobID)
	if j.Status != store.Succeeded {
		t.Fatalf("job: %s %s", j.Status, j.Error)
	}
	hist, err := h.store.BenchHistory(context.Background(), "qwen", 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("history %+v (%v), want the 2 benchmarks once each", hist, err)
	}
	var res ops.Result
	if err := json.Unmarshal(j.Result, &res); err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(res.Details, "\n"); strings.Contains(all, fmt.Sprintf("#%d", j.ID)) {
		t.Errorf("job #%d is compared with itself:\n%s", j.ID, all)
	}
}

// Benchmarks too short for the engine to log one decode window measure no
// accept length: the thread does not warn about it once per benchmark, and
// the result says it in one line for all of them, naming the config key
// that measures it (bench.output_len); their rows show "—", never 0.00.
func TestShortWindowsMergeIntoOneLineOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	_, rb := labRunbook(t) // 8 prompts of 64 tokens: at concurrency 8 one wave, fewer than 40 decode iterations
	h := newHarness(t, jobs.RunbookBackend(rb), roles)
	j := h.wait(h.handle("olga", "sweep qwen steps 4,8 at 8,16").JobID)
	if j.Status != store.Succeeded {
		t.Fatalf("sweep: %s %s", j.Status, j.Error)
	}
	_, replies := h.chat.Thread(j.Thread)
	var result string
	warnings := 0
	for _, r := range replies {
		if r.Kind == KindResult {
			result = r.Text
		}
		if strings.Contains(r.Text, "⚠") && strings.Contains(r.Text, "decode-log window") {
			warnings++
		}
	}
	lines := 0
	for _, l := range strings.Split(result, "\n") {
		if strings.HasPrefix(l, "accept length — at ") {
			lines++
			if !strings.Contains(l, "raise bench.output_len in the config (these ran 64 tokens per request)") {
				t.Errorf("the line names nothing the user can change: %s", l)
			}
		}
	}
	if lines != 1 || warnings != 0 || strings.Contains(result, "0.00") || strings.Contains(result, "benchmark more prompts") {
		t.Errorf("%d merged lines (want 1), %d warnings in the thread (want 0):\n%s", lines, warnings, result)
	}
	// One benchmark says it the same way.
	b := h.wait(h.handle("olga", "bench qwen concurrency=8 prompts=8").JobID)
	var res ops.Result
	if err := json.Unmarshal(b.Result, &res); err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(res.Details, "\n"); !strings.Contains(all, "accept length — at 1 of 1 benchmarks (concurrency 8: steps 3)") ||
		!strings.Contains(all, "raise bench.output_len in the config") {
		t.Errorf("bench details:\n%s", all)
	}
}
