package report

import (
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/store"
)

// shortRun is a benchmark whose accept length was not measured: the run was
// shorter than one decode-log window.
func shortRun(out int) *bench.Result {
	return &bench.Result{AcceptLen: math.NaN(), AcceptRate: math.NaN(), AcceptCause: bench.CauseShortRun,
		AcceptUnknown: "the run was shorter than one decode-log window (40 decode iterations)",
		Settings:      bench.Settings{OutputLen: out}, TTFT: bench.Stat{P50: 12, P99: 20}}
}

// A figure a point did not measure is "—" in its table, never 0.00 or 0%,
// and one line after the tables says why, once for every point of that
// cause, with what the user can change (the config key).
func TestSweepTablesShowUnknownAsDash(t *testing.T) {
	t.Parallel()
	var pts []ops.SweepPoint
	for _, c := range []int{32, 64} {
		for _, s := range []int{2, 9, 10} {
			p := ops.SweepPoint{Steps: s, Concurrency: c, OK: true, OutputTokS: 3000 - 100*float64(s), PerStreamTokS: 60,
				AcceptLen: 1.9, AcceptRate: 0.45, Bench: &bench.Result{TTFT: bench.Stat{P50: 12, P99: 20}}}
			if s >= 9 {
				p.AcceptLen, p.AcceptRate, p.Bench = math.NaN(), math.NaN(), shortRun(48)
			}
			pts = append(pts, p)
		}
	}
	tab := strings.Join(SweepTables(pts, nil, "", ops.Setting{}), "\n")
	if strings.Contains(tab, "0.00") || strings.Contains(tab, " 0%") || strings.Contains(tab, "NaN") {
		t.Errorf("an unmeasured figure shows as a number:\n%s", tab)
	}
	if !regexp.MustCompile(`(?m)^9 +2100\.0 +60\.0 +— +— +12 ms +20 ms`).MatchString(tab) {
		t.Errorf("steps 9 does not show — for its accept length and rate:\n%s", tab)
	}
	notes := regexp.MustCompile(`(?m)^accept length — .*$`).FindAllString(tab, -1)
	want := "accept length — at 4 of 6 benchmarks (concurrency 32: steps 9, 10; concurrency 64: steps 9, 10): " +
		"the run was shorter than one decode-log window (40 decode iterations); raise bench.output_len in the config " +
		"(these ran 48 tokens per request), or bench.prompts, so that each run outlasts one window"
	if len(notes) != 1 || notes[0] != want {
		t.Errorf("notes %q, want one line:\n%s", notes, want)
	}
}

// An applied per-load form is one table: each load names what ran there
// (the steps the engine reported choosing, else the candidates it chose
// among; never the unit's starting steps on every row), an acceptance rate
// it could not compute is "—" with its reason once, and beside each load
// what ran before it.
func TestPerLoadTableNamesWhatRan(t *testing.T) {
	t.Parallel()
	spec := &ops.Spec{Engine: "sglang", Steps: 11, TopK: 1, DraftTokens: 12, Adaptive: "/etc/sglang/qwen-adaptive.json"}
	rate := func() *bench.Result {
		return &bench.Result{AcceptLen: 2.1, AcceptRate: math.NaN(), AcceptCause: bench.CauseDraftsUnknown, AcceptUnknown: "drafts per step unknown",
			TTFT: bench.Stat{P50: 12, P99: 20}}
	}
	pts := []ops.SweepPoint{
		{Steps: 11, Concurrency: 1, OK: true, OutputTokS: 270.7, PerStreamTokS: 270, AcceptLen: 6.1, AcceptRate: math.NaN(), Spec: spec, Bench: rate(),
			PerLoad: &ops.PointPerLoad{Among: []int{11, 10, 9}, Chosen: []bench.StepsSeen{{Steps: 10, Samples: 9}, {Steps: 11, Samples: 3}}}},
		{Steps: 11, Concurrency: 32, OK: true, OutputTokS: 3105.1, PerStreamTokS: 97, AcceptLen: 1.9, AcceptRate: math.NaN(), Spec: spec, Bench: rate(),
			PerLoad: &ops.PointPerLoad{Among: []int{1}, Chosen: []bench.StepsSeen{{Steps: 1, Samples: 7}}}},
		{Steps: 11, Concurrency: 64, OK: true, OutputTokS: 2927.9, PerStreamTokS: 46, AcceptLen: 2.9, AcceptRate: math.NaN(), Spec: spec, Bench: rate(),
			PerLoad: &ops.PointPerLoad{Among: []int{3, 2}}},
	}
	prev := []*store.BenchResult{{JobID: 8, Settings: "steps=3,topk=1,draft=4", OutputTokS: 223.4}, nil,
		{JobID: 7, Settings: SettingsKey(spec), OutputTokS: 2900}}
	tab := strings.Join(SweepTables(pts, prev, "", ops.Setting{}), "\n")
	for _, want := range []string{
		"steps 10, chosen by the engine (9 of 12 samples; 11 in 3)",
		"steps 1, chosen by the engine ",
		"chosen by the engine among 2/3",
		"223.4 (+21.2%, #8) at steps=3,topk=1,draft=4",
		"none at this load",
		"2900.0 (+1.0%, #7) same form",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if strings.Contains(tab, "steps 11") || strings.Contains(tab, " 0%") {
		t.Errorf("a row says the unit's steps 11, or a rate of 0%%:\n%s", tab)
	}
	if n := strings.Count(tab, "drafts proposed per step are unknown"); n != 1 {
		t.Errorf("the reason for the unknown rate is given %d times, want once:\n%s", n, tab)
	}
}
