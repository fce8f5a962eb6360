package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// labRunbook is the real ops pipeline over SSH against the lab (the
// simulated GPU node), with lab time running 1000x.
func labRunbook(t testing.TB) (*lab.Lab, *ops.Runbook) {
	t.Helper()
	l := labtest.Start(t, lab.Options{TimeScale: 1000})
	topo := l.Topology()
	cfg := labtest.OpsConfig(t, topo, 20*time.Second)
	cfg.Bench = ops.BenchDefaults{Prompts: 8, Concurrency: 2, InputLen: 32, OutputLen: 64}
	cfg.ReapGrace, cfg.Poll, cfg.SettleTime = 300*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	cfg.StopTimeout, cfg.ClearTimeout = 20*time.Second, 20*time.Second
	rb, err := ops.New(cfg)
	if err != nil {
		t.Fatalf("ops.New: %v", err)
	}
	t.Cleanup(func() { rb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatalf("lab not ready: %v", err)
	}
	return l, rb
}

// A regression is detected when the lab's engine gets slower: benchmarks at
// the default physics build the history, one more at the same physics is no
// regression, and after the engine is made 1.6x slower and restarted the next
// benchmark is one, with both figures and the job in the alert. The
// threshold is 20%: the lab's tok/s is measured in wall time and varies
// between runs on a busy machine (5% seen, and once 12%); 1.6x slower is
// 37.5% below.
func TestRegressionDetectedWhenTheEngineGetsSlower(t *testing.T) {
	// Not t.Parallel(): it compares throughput the lab measures in wall time, so it runs in
	// the package's serial phase, before and apart from the package's parallel tests.
	testrun.Long(t)
	l, rb := labRunbook(t)
	h := newHarness(t, jobs.RunbookBackend(rb), roles)
	ctx := context.Background()
	pol := report.RegressionPolicy{Pct: 20, Runs: 7}
	bench := func() (store.Job, *ops.Result) {
		t.Helper()
		j := h.wait(h.handle("olga", "bench qwen").JobID)
		if j.Status != store.Succeeded {
			t.Fatalf("bench: %s %s", j.Status, j.Error)
		}
		res := &ops.Result{}
		if err := json.Unmarshal(j.Result, res); err != nil || res.Bench == nil {
			t.Fatalf("job #%d has no benchmark", j.ID)
		}
		return j, res
	}
	var base []float64
	for range 3 {
		j, res := bench()
		base = append(base, res.Bench.OutputTokS)
		// Too few comparable runs before the third: nothing to judge by.
		if al, err := report.CheckRegression(ctx, h.store, j, res, pol); err != nil || al != nil {
			t.Fatalf("run %d at the default physics: alert %+v err %v", len(base), al, err)
		}
	}
	j, res := bench()
	if al, err := report.CheckRegression(ctx, h.store, j, res, pol); err != nil || al != nil {
		t.Fatalf("same physics (%.1f tok/s, earlier %v) judged a regression: %+v %v", res.Bench.OutputTokS, base, al, err)
	}

	l.SlowEngine(1.6)
	if j := h.wait(h.handle("olga", "svc restart qwen").JobID); j.Status != store.Succeeded {
		t.Fatalf("restart: %s %s", j.Status, j.Error)
	}
	j, res = bench()
	al, err := report.CheckRegression(ctx, h.store, j, res, pol)
	if err != nil || al == nil {
		t.Fatalf("a 1.6x slower engine (%.1f tok/s, earlier %v) is not a regression: %v", res.Bench.OutputTokS, base, err)
	}
	if al.JobID != j.ID || al.Service != "qwen" || len(al.Regressions) != 1 {
		t.Fatalf("alert %+v", al)
	}
	r := al.Regressions[0]
	if r.Runs != 4 || r.Current != res.Bench.OutputTokS || r.DropPct < 20 || r.Settings != "steps=3,topk=1,draft=4" {
		t.Errorf("regression %+v (current %.1f tok/s)", r, res.Bench.OutputTokS)
	}
	for _, want := range []string{fmt.Sprintf("%.1f tok/s", r.Current), fmt.Sprintf("median %.1f tok/s", r.Median),
		fmt.Sprintf("job #%d", j.ID), fmt.Sprintf("`job %d`", j.ID), "concurrency 2, steps=3,topk=1,draft=4: output", "next:"} {
		if !strings.Contains(al.Text, want) {
			t.Errorf("alert text lacks %q:\n%s", want, al.Text)
		}
	}
	t.Logf("default physics %v tok/s, 1.6x slower %.1f tok/s (%.0f%% below the median)\n%s", base, r.Current, r.DropPct, al.Text)
}

// Only comparable runs count, and the threshold is the policy's.
func TestCheckRegressionComparesLikeForLike(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.Func(nil), roles)
	ctx := context.Background()
	spec := &ops.Spec{Engine: "sglang", Steps: 10, TopK: 1, DraftTokens: 11}
	load := bench.Settings{Prompts: 16, Concurrency: 4, InputLen: 256, OutputLen: 256}
	for _, tok := range []float64{300, 280, 290, 1000} {
		job, err := h.store.CreateJob(ctx, store.Job{Command: "bench qwen", Service: "qwen"})
		if err != nil {
			t.Fatal(err)
		}
		row := store.BenchResult{JobID: job.ID, Service: "qwen", Settings: report.SettingsKey(spec), OutputTokS: tok,
			Prompts: 16, Concurrency: 4, InputLen: 256, OutputLen: 256}
		if tok == 1000 {
			row.Concurrency = 64 // another load: never compared
		}
		if _, err := h.store.AddBenchResult(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	job, _ := h.store.CreateJob(ctx, store.Job{Command: "sweep qwen steps 10", Service: "qwen"})
	res := &ops.Result{Points: []ops.SweepPoint{{Steps: 10, OK: true, Spec: spec, Bench: &ops.BenchResult{OutputTokS: 255, Settings: load}}}}
	if al, _ := report.CheckRegression(ctx, h.store, job, res, report.RegressionPolicy{Pct: 15}); al != nil {
		t.Errorf("255 vs median 290 is 12%% below: no alert at 15%%, got %s", al.Text)
	}
	al, err := report.CheckRegression(ctx, h.store, job, res, report.RegressionPolicy{Pct: 10})
	if err != nil || al == nil || al.Regressions[0].Median != 290 || al.Regressions[0].Runs != 3 {
		t.Fatalf("255 vs median 290 at 10%%: %+v %v", al, err)
	}
}

// Accept length is judged like tok/s, where it was measured: a point with
// no accept length (speculation off) is judged by tok/s alone, and history
// rows without one do not count towards its median.
func TestCheckRegressionJudgesAcceptLength(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.Func(nil), roles)
	ctx := context.Background()
	spec := &ops.Spec{Engine: "sglang", Steps: 3, TopK: 1, DraftTokens: 4}
	load := bench.Settings{Prompts: 16, Concurrency: 8, InputLen: 256, OutputLen: 256}
	for _, acc := range []float64{3.0, 3.2, 0, 2.9} { // one row without an accept length
		job, err := h.store.CreateJob(ctx, store.Job{Command: "bench qwen", Service: "qwen"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.AddBenchResult(ctx, store.BenchResult{JobID: job.ID, Service: "qwen", Settings: report.SettingsKey(spec),
			OutputTokS: 900, AcceptLen: acc, Prompts: 16, Concurrency: 8, InputLen: 256, OutputLen: 256}); err != nil {
			t.Fatal(err)
		}
	}
	job, _ := h.store.CreateJob(ctx, store.Job{Command: "bench qwen", Service: "qwen"})
	check := func(acc float64) *report.Alert {
		t.Helper()
		res := &ops.Result{Spec: spec, Bench: &ops.BenchResult{OutputTokS: 905, AcceptLen: acc, Settings: load}}
		al, err := report.CheckRegression(ctx, h.store, job, res, report.RegressionPolicy{Pct: 10, Runs: 7})
		if err != nil {
			t.Fatal(err)
		}
		return al
	}
	if al := check(0); al != nil {
		t.Errorf("no accept length measured, tok/s as before: %s", al.Text)
	}
	if al := check(2.8); al != nil {
		t.Errorf("accept length 2.8 against the median 3.0 is within 10%%: %s", al.Text)
	}
	al := check(2.4)
	if al == nil || len(al.Regressions) != 1 {
		t.Fatalf("accept length 2.4 against the median 3.0: %+v", al)
	}
	if r := al.Regressions[0]; r.Metric != ops.MetricAcceptLen || r.Median != 3.0 || r.Runs != 3 || r.Load.Concurrency != 8 ||
		!strings.Contains(al.Text, "• concurrency 8, steps=3,topk=1,draft=4: accept length 2.40, 20.0% below the median 3.00 of the last 3 runs") {
		t.Errorf("regression %+v\n%s", r, al.Text)
	}
}
