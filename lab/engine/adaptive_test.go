package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// The router and the graph pruning answer as SGLang's own unit tests of them do
// (test_cuda_graph_bs_pads_batch_up_before_routing and
// test_cuda_graph_bs_for_step_prunes_unreachable_graphs, default table, graph sizes 4, 8,
// 16, 32): keys are lower bounds applied after padding, and each step's graphs exist only
// at the sizes whose slot lists it.
func TestAdaptiveRouterMatchesSGLang(t *testing.T) {
	t.Parallel()
	cfg, err := ParseAdaptiveConfig([]byte(DefaultAdaptiveConfig))
	if err != nil {
		t.Fatal(err)
	}
	graphs := []int{4, 8, 16, 32}
	for n, want := range map[int]int{1: 1, 3: 1, 4: 1, 5: 8, 8: 8, 9: 8, 16: 8, 17: 32, 32: 32, 33: 32, 63: 32, 64: 64, 100: 64} {
		if got := batchSizeKey(cfg.keys(), graphs, n); got != want {
			t.Errorf("batch %d runs slot %d, want %d", n, got, want)
		}
	}
	for step, want := range map[int][]int{0: {8, 16, 32}, 1: {4, 8, 16, 32}, 3: {4, 8, 16}, 5: {4}, 7: {4}, 2: {}} {
		if got := cudaGraphBSForStep(cfg, graphs, step); !slices.Equal(got, want) {
			t.Errorf("step %d graphs at %v, want %v", step, got, want)
		}
	}
	// Without graphs nothing pads: a batch of 5 runs slot "1".
	if got := batchSizeKey(cfg.keys(), nil, 5); got != 1 {
		t.Errorf("no graphs: batch 5 runs slot %d, want 1", got)
	}
	s, _, err := Check(mustParse(t, sglangTestArgv("--speculative-adaptive --cuda-graph-bs 32 4 16 8")))
	if err != nil || !slices.Equal(s.graphBatchSizes(), graphs) {
		t.Fatalf("--cuda-graph-bs 32 4 16 8: graphs %v (%v)", s.graphBatchSizes(), err)
	}
}

// The graphs' memory follows the table: the launch steps are captured at every graph
// size, every other candidate only where its slot reaches. With the cap raised to 64, the
// issue's table starts from steps 1 (its deep slots stop at batch 4 and 24) where the old
// model, the widest candidate at every size, needed 64 x 12 tokens and did not fit; launched
// at steps 11 it still does not fit.
func TestAdaptiveGraphsFollowTheTable(t *testing.T) {
	t.Parallel()
	const table = `{"1": {"candidate_steps": [9, 10, 11]}, "8": {"candidate_steps": [6, 7]}, "32": {"candidate_steps": [1]}, "64": {"candidate_steps": [2, 3]}}`
	total, frac := 81559, 0.88
	free := total - int(frac*float64(total)) - ContextMiB // the lab's H100 beyond mem-fraction-static 0.88 and the context
	check := func(launch int) Settings {
		s, _, err := checkWithFile(t, fmt.Sprintf("--speculative-algorithm NEXTN --speculative-num-steps %d --speculative-eagle-topk 1 --speculative-num-draft-tokens %d "+
			"--max-running-requests 64 --speculative-adaptive --speculative-adaptive-config FILE", launch, launch+1), table)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := check(1)
	want := map[int][]int{1: {1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64}, 2: {64}, 3: {64}, 6: {8, 12, 16, 24}, 7: {8, 12, 16, 24},
		9: {1, 2, 4}, 10: {1, 2, 4}, 11: {1, 2, 4}}
	caps := s.GraphCaptures()
	if len(caps) != len(want) || caps[0].Steps != 1 {
		t.Fatalf("captures %+v", caps)
	}
	for _, c := range caps {
		if !slices.Equal(c.BatchSizes, want[c.Steps]) || c.Tokens != c.Steps+1 {
			t.Errorf("steps %d: graphs at %v for %d tokens, want %v", c.Steps, c.BatchSizes, c.Tokens, want[c.Steps])
		}
	}
	if got := s.GraphMiB(); got != int(math.Round(64*4*graphMiBPerBSToken)) || got > free {
		t.Errorf("launch steps 1: graphs %d MiB, want 64 x 4 tokens (%d MiB free)", got, free)
	}
	if old := int(math.Round(64 * 12 * graphMiBPerBSToken)); old <= free {
		t.Fatalf("the widest candidate at every size (%d MiB) fits %d MiB: the case shows nothing", old, free)
	}
	if got := check(11).GraphMiB(); got != int(math.Round(64*12*graphMiBPerBSToken)) || got <= free {
		t.Errorf("launch steps 11: graphs %d MiB, want 64 x 12 tokens, beyond the %d MiB free", got, free)
	}
	// SGLang's default table, cap 48, launched at 3: step 7 only at batch 1, 2, 4; the launch
	// steps at 48 are the largest graph.
	d, _, err := checkWithFile(t, "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-adaptive", "")
	if err != nil || d.GraphMiB() != int(math.Round(48*4*graphMiBPerBSToken)) {
		t.Fatalf("default table: %d MiB, %v", d.GraphMiB(), err)
	}
	if off, _, _ := checkWithFile(t, "--speculative-algorithm NEXTN --speculative-adaptive --disable-cuda-graph", ""); off.GraphMiB() != 0 || off.GraphCaptures() != nil {
		t.Errorf("--disable-cuda-graph: %d MiB, %+v", off.GraphMiB(), off.GraphCaptures())
	}
}

// Non-digit top-level keys are defaults merged into every slot, a slot's own value wins,
// "strategy" is no slot; throughput_aware takes positive candidates and its knobs.
func TestAdaptiveConfigDefaultsAndStrategy(t *testing.T) {
	t.Parallel()
	c, err := ParseAdaptiveConfig([]byte(`{"ceiling_coeff": 1.5, "ema_alpha": 0.5, "strategy": "ema",
		"8": {"candidate_steps": [3, 1, 3], "ceiling_coeff": 0}, "1": {"candidate_steps": [7, true]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Strategy != StrategyEMA || len(c.Slots) != 2 || c.Slots[0].BatchSize != 1 || c.Slots[0].CeilingCoeff != 1.5 ||
		c.Slots[1].CeilingCoeff != 0 || c.Slots[1].EMAAlpha != 0.5 || !slices.Equal(c.Slots[1].CandidateSteps, []int{1, 3}) ||
		!slices.Equal(c.Slots[0].CandidateSteps, []int{1, 7}) {
		t.Fatalf("config %+v", c)
	}
	ta, err := ParseAdaptiveConfig([]byte(`{"strategy": "throughput_aware", "update_interval": 3, "1": {"candidate_steps": [1, 3]}}`))
	if err != nil || ta.Strategy != StrategyThroughputAware || ta.UpdateInterval != 3 || ta.WindowSize != 20 || ta.SwitchHysteresis != 0.1 {
		t.Fatalf("throughput_aware: %+v, %v", ta, err)
	}
}

// A file SGLang refuses stops the start with SGLang's own message, as the engine's last
// line (adaptive_spec_params.py, throughput_aware_controller.py at 015c8726).
func TestAdaptiveConfigRefusedAsSGLang(t *testing.T) {
	t.Parallel()
	const flags = "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-adaptive --speculative-adaptive-config FILE"
	for _, tc := range []struct{ name, cfg, last string }{
		{"old flat format", `{"candidate_steps": [1, 3, 5], "ema_alpha": 0.2}`,
			`ValueError: speculative_adaptive_config must contain at least one integer-string BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: ['candidate_steps', 'ema_alpha']`},
		{"unknown strategy", `{"strategy": "fast", "1": {"candidate_steps": [3]}}`,
			`ValueError: speculative adaptive config 'strategy' must be 'ema' or 'throughput_aware', got 'fast'`},
		{"strategy null", `{"strategy": null, "1": {"candidate_steps": [3]}}`,
			`ValueError: speculative adaptive config 'strategy' must be 'ema' or 'throughput_aware', got None`},
		{"throughput_aware refuses step 0", `{"strategy": "throughput_aware", "1": {"candidate_steps": [3]}, "64": {"candidate_steps": [0]}}`,
			`ValueError: throughput-aware config key '64': candidate_steps must be a non-empty list of positive ints, got [0]`},
		{"throughput_aware flat", `{"strategy": "throughput_aware", "candidate_steps": [3]}`,
			`ValueError: throughput-aware adaptive config must contain at least one integer-string BS key, e.g. {"1": {"candidate_steps": [1, 3, 7]}}. Got keys: ['strategy', 'candidate_steps']`},
		{"slot not an object", `{"1": [1, 3]}`, `AttributeError: 'list' object has no attribute 'get'`},
		{"float step", `{"1": {"candidate_steps": [3, 1.0]}}`, `ValueError: BS 1: candidate_steps must be a list of non-negative ints, got [3, 1.0]`},
		{"no candidate_steps", `{"1": {"ema_alpha": 0.1}}`, `ValueError: BS 1: candidate_steps must be a list of non-negative ints, got None`},
		{"a string", `"1"`, `ValueError: speculative adaptive config must be a JSON object, got str`},
		{"window 0", `{"strategy": "throughput_aware", "window_size": 0, "1": {"candidate_steps": [3]}}`, `ValueError: window_size must be an integer >= 1, got 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := checkWithFile(t, flags, tc.cfg)
			se, ok := err.(*StartError)
			if !ok {
				t.Fatalf("err = %v, want the engine's start to fail", err)
			}
			if !slices.Contains(se.Lines, tc.last) {
				t.Fatalf("lines:\n%s\nwant the line %q", strings.Join(se.Lines, "\n"), tc.last)
			}
		})
	}
	// Step 0 is a candidate with the ema strategy, and may be the launch steps.
	s, _, err := checkWithFile(t, "--speculative-algorithm EAGLE --speculative-num-steps 0 --speculative-adaptive --speculative-adaptive-config FILE",
		`{"1": {"candidate_steps": [0, 3]}}`)
	if err != nil || s.Steps != 0 || s.DraftTokens != 1 || s.TopK != 1 {
		t.Fatalf("launch steps 0: %v, steps %d draft %d topk %d", err, s.Steps, s.DraftTokens, s.TopK)
	}
}

// serverInfoState reads /server_info's internal_states[0].
func serverInfoState(t *testing.T, url string) map[string]any {
	t.Helper()
	st, ok := readState(url)
	if !ok {
		t.Fatalf("no internal_states on %s/server_info", url)
	}
	return st
}

func readState(url string) (map[string]any, bool) {
	resp, err := http.Get(url + "/server_info")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var info struct {
		States []map[string]any `json:"internal_states"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || len(info.States) == 0 {
		return nil, false
	}
	return info.States[0], true
}

// With SGLang's default table and the cap raised to 64, a full batch of 64 pads to the
// graph of 64 and runs slot "64": steps 0, no drafting; /server_info meanwhile reports
// steps 0 while its top-level args keep the launch steps; one stream runs slot "1" and
// drafts again.
func TestAdaptiveStepZeroAtFullBatch(t *testing.T) {
	t.Parallel()
	te := startEngine(t, sglangArgv("--model-path /m --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "+
		"--speculative-num-draft-tokens 4 --speculative-adaptive --max-running-requests 64"), fastPhysics())
	if st := serverInfoState(t, te.url); st["speculative_num_steps"] != 3.0 || st["speculative_num_draft_tokens"] != 4.0 {
		t.Fatalf("before any batch: %v, want the launch steps 3", st)
	}
	t0 := te.e.Truth()
	ran := make(chan error, 1)
	go func() {
		_, err := streamConcurrent(te.url, 64, func(int) string {
			// Long enough (2 s at steps 0) that all 64 run together however slowly the
			// requests arrive on a loaded machine.
			return `{"prompt":"a","max_tokens":2000,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
		})
		ran <- err
	}()
	// While the 64 run, /server_info says steps 0 (the poll reads it without failing the
	// test from inside the condition).
	testkit.WaitFor(t, 10*time.Second, "internal_states to report steps 0 while 64 streams run", func() bool {
		st, ok := readState(te.url)
		return ok && st["speculative_num_steps"] == 0.0 && st["speculative_num_draft_tokens"] == 1.0
	})
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	t1 := te.e.Truth()
	if share := float64(t1.DraftSteps-t0.DraftSteps) / float64(t1.VerifySteps-t0.VerifySteps); share > 0.2 {
		t.Fatalf("64 streams: %.0f%% of the verify steps drafted, want almost none (slot 64: steps 0)", 100*share)
	}
	_, b := getBody(t, te.url+"/server_info")
	if !strings.Contains(string(b), `"speculative_num_steps":3`) {
		t.Fatalf("top-level server args lost the launch steps: %s", b)
	}
	if len(te.logs.matching("Switch adaptive runtime state: steps ")) == 0 || len(te.logs.matching("-> 0, draft_tokens ")) == 0 {
		t.Fatalf("no switch to steps 0 logged: %q", te.logs.matching("Switch adaptive"))
	}
	oneStream(t, te.url, 200)
	t2 := te.e.Truth()
	st := serverInfoState(t, te.url)
	if d := draftsPerStep(t1, t2); d < 1 || !slices.Contains([]any{1.0, 3.0, 5.0, 7.0}, st["speculative_num_steps"]) {
		t.Fatalf("one stream: %.2f draft tokens per step, internal state %v: want slot 1's steps", d, st)
	}
}

// The throughput_aware strategy runs, for the batch's slot, the candidate with the most
// tokens per second by the engine's physics once it has seen window_size verifies.
func TestThroughputAwarePicksTheFastestCandidate(t *testing.T) {
	t.Parallel()
	path := writeTemp(t, `{"strategy": "throughput_aware", "window_size": 4, "update_interval": 2, "1": {"candidate_steps": [1, 2, 4, 6]}}`)
	p := fastPhysics()
	best := 1
	for _, k := range []int{2, 4, 6} {
		if p.StreamTokS(Chain(k), 1) > p.StreamTokS(Chain(best), 1) {
			best = k
		}
	}
	te := startEngine(t, sglangArgv("--model-path /m --speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-adaptive --speculative-adaptive-config "+path), p)
	oneStream(t, te.url, 300)
	if st := serverInfoState(t, te.url); st["speculative_num_steps"] != float64(best) {
		t.Fatalf("one stream: internal state %v, want steps %d (the physics' best of 1, 2, 4, 6)", st, best)
	}
}

// writeTemp writes text to a file of the test's own directory and returns its path.
func writeTemp(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "adaptive.json")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
