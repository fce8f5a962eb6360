package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// checkWithFile checks flags with an adaptive config file holding cfg ("" = no file).
func checkWithFile(t *testing.T, flags, cfg string) (Settings, []string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qwen-adaptive.json")
	if cfg != "" {
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flags = strings.ReplaceAll(flags, "FILE", path)
	return Check(mustParse(t, sglangArgv("--model-path /models/Qwen3.5-122B-A10B "+flags)))
}

func TestCheckAdaptive(t *testing.T) {
	t.Parallel()
	const cfg = `{"1": {"candidate_steps": [7, 5]}, "8": {"candidate_steps": [3]}, "64": {"candidate_steps": [0]}, "strategy": "ema"}`
	s, lines, err := checkWithFile(t, "--speculative-algorithm NEXTN --speculative-num-steps 7 --speculative-eagle-topk 1 "+
		"--speculative-num-draft-tokens 8 --speculative-adaptive --speculative-adaptive-config FILE", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.Adaptive == nil || len(s.Adaptive.Slots) != 3 || s.Adaptive.Slots[0].BatchSize != 1 ||
		fmt.Sprint(s.Adaptive.Slots[0].CandidateSteps) != "[5 7]" || s.Adaptive.Slots[0].WarmupBatches != 10 || s.DraftTokens != 8 {
		t.Fatalf("adaptive %+v, draft tokens %d", s.Adaptive, s.DraftTokens)
	}
	if fmt.Sprint(s.Adaptive.CandidateSteps()) != "[0 3 5 7]" || len(lines) != 1 {
		t.Fatalf("candidates %v, lines %q", s.Adaptive.CandidateSteps(), lines)
	}

	// Steps unset: the middle candidate; topk 1; draft tokens steps + 1.
	s, _, err = checkWithFile(t, "--speculative-algorithm EAGLE --speculative-adaptive --speculative-adaptive-config FILE", cfg)
	if err != nil || s.Steps != 5 || s.TopK != 1 || s.DraftTokens != 6 {
		t.Fatalf("steps unset: %v, steps %d topk %d draft %d", err, s.Steps, s.TopK, s.DraftTokens)
	}

	// No file: SGLang's default table.
	s, _, err = checkWithFile(t, "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-adaptive", "")
	if err != nil || s.Adaptive == nil || s.Adaptive.Path != "" || len(s.Adaptive.Slots) != 4 {
		t.Fatalf("default table: %v %+v", err, s.Adaptive)
	}

	// topk 2: SGLang warns and runs the static settings.
	s, lines, err = checkWithFile(t, "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 2 --speculative-num-draft-tokens 6 --speculative-adaptive --speculative-adaptive-config FILE", cfg)
	if err != nil || s.Adaptive != nil || len(lines) == 0 ||
		!strings.Contains(lines[0], "speculative_adaptive disabled: speculative_eagle_topk=2 (only topk=1 is supported). Falling back to static speculative params.") {
		t.Fatalf("topk 2: %v adaptive %+v lines %q", err, s.Adaptive, lines)
	}
}

func TestCheckAdaptiveRefusals(t *testing.T) {
	t.Parallel()
	const flags = "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-adaptive --speculative-adaptive-config FILE"
	tests := []struct{ name, cfg, last string }{
		{"steps not a candidate", `{"1": {"candidate_steps": [5, 7]}, "64": {"candidate_steps": [0]}}`,
			"ValueError: --speculative-num-steps=3 is not in the adaptive config candidate_steps [0, 5, 7]. Pass one of those values."},
		{"no file", "", "FileNotFoundError: [Errno 2] No such file or directory: 'PATH'"},
		{"negative step", `{"1": {"candidate_steps": [3, -1]}}`, "ValueError: BS 1: candidate_steps must be a list of non-negative ints, got [3, -1]"},
		{"no slot", `{"strategy": "ema"}`, `ValueError: speculative_adaptive_config must contain at least one integer-string BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: ['strategy']`},
		{"not an object", `[1, 3]`, "ValueError: speculative adaptive config must be a JSON object, got list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "a.json")
			if tc.cfg != "" {
				if err := os.WriteFile(path, []byte(tc.cfg), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Check(mustParse(t, sglangArgv("--model-path /m "+strings.ReplaceAll(flags, "FILE", path))))
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *StartError", err)
			}
			if want := strings.ReplaceAll(tc.last, "PATH", path); se.ExitStatus != 1 || se.Lines[len(se.Lines)-1] != want {
				t.Fatalf("last line %q, want %q", se.Lines[len(se.Lines)-1], want)
			}
		})
	}
}

func oneStream(t *testing.T, url string, tokens int) {
	t.Helper()
	runConcurrent(t, url, 1, func(int) string {
		return fmt.Sprintf(`{"prompt":"a","max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, tokens)
	})
}

// draftsPerStep is the draft tokens verified per drafting step since t0.
func draftsPerStep(t0, t1 Truth) float64 {
	return float64(t1.DraftsProposed-t0.DraftsProposed) / float64(max(t1.DraftSteps-t0.DraftSteps, 1))
}

// The lab's SGLang moves its steps per batch size as the adaptive file says: a slot of one
// candidate holds its steps, a slot of several moves by the accepted drafts.
func TestAdaptiveStepsFollowTheBatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "qwen-adaptive.json")
	if err := os.WriteFile(path, []byte(`{"1": {"candidate_steps": [7]}, "8": {"candidate_steps": [1]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	te := startEngine(t, sglangArgv("--model-path /m --speculative-algorithm NEXTN --speculative-num-steps 7 --speculative-eagle-topk 1 "+
		"--speculative-num-draft-tokens 8 --speculative-adaptive --speculative-adaptive-config "+path), fastPhysics())
	t0 := te.e.Truth()
	oneStream(t, te.url, 200)
	t1 := te.e.Truth()
	if d := draftsPerStep(t0, t1); d != 7 {
		t.Fatalf("one stream: %.2f draft tokens per step, want 7 (slot 1)", d)
	}
	runConcurrent(t, te.url, 8, func(int) string {
		return `{"prompt":"a","max_tokens":300,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	})
	t2 := te.e.Truth()
	if d := draftsPerStep(t1, t2); d < 1 || d > 2.5 {
		t.Fatalf("8 streams: %.2f draft tokens per step, want about 1 (slot 8; slot 1 only in the tail)", d)
	}
	if l := float64(t2.OutputTokens-t0.OutputTokens) / float64(t2.VerifySteps-t0.VerifySteps); l > 8 {
		t.Fatalf("accept length %.2f above steps+1", l)
	}

	moving := startEngine(t, sglangArgv("--model-path /m --speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 "+
		"--speculative-num-draft-tokens 2 --speculative-adaptive"), fastPhysics())
	oneStream(t, moving.url, 300)
	if len(moving.logs.matching("Adaptive spec params updated: steps 1 -> 3 (ema_accept_len=")) == 0 {
		t.Fatalf("the default table's slot 1 did not move up from steps 1 at acceptance 0.8; logs:\n%s", strings.Join(moving.logs.matching("Adaptive"), "\n"))
	}
}

// The lab's vLLM honours num_speculative_tokens_per_batch_size and its spec-decode counters
// count what each batch size drafted.
func TestVLLMBatchTable(t *testing.T) {
	t.Parallel()
	te := startEngine(t, []string{"/opt/vllm/.venv/bin/vllm", "serve", "/models/q", "--served-model-name", "qwen",
		"--speculative-config", `{"method":"mtp","num_speculative_tokens":5,"num_speculative_tokens_per_batch_size":[[1,1,9],[2,64,1]]}`}, fastPhysics())
	if tb := te.e.Settings().BatchTable; len(tb) != 2 || tb[0] != (BatchK{1, 1, 9}) {
		t.Fatalf("table %+v", tb)
	}
	read := func() (float64, float64) {
		_, b := getBody(t, te.url+"/metrics")
		return promValue(t, string(b), "vllm:spec_decode_num_drafts_total"), promValue(t, string(b), "vllm:spec_decode_num_draft_tokens_total")
	}
	d0, k0 := read()
	t0 := te.e.Truth()
	oneStream(t, te.url, 200)
	d1, k1 := read()
	t1 := te.e.Truth()
	if got := (k1 - k0) / (d1 - d0); got != 5 || draftsPerStep(t0, t1) != 5 {
		t.Fatalf("one stream: %.2f draft tokens per draft on /metrics, want 5 (9 clamped to num_speculative_tokens)", got)
	}
	runConcurrent(t, te.url, 8, func(int) string {
		return `{"prompt":"a","max_tokens":300,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	})
	d2, k2 := read()
	if got := (k2 - k1) / (d2 - d1); got < 1 || got > 2 {
		t.Fatalf("8 streams: %.2f draft tokens per draft, want about 1", got)
	}

	_, _, err := Check(mustParse(t, []string{"/opt/vllm/.venv/bin/vllm", "serve", "/models/q", "--speculative-config",
		`{"method":"mtp","num_speculative_tokens":3,"num_speculative_tokens_per_batch_size":[[1,8,3],[4,16,1]]}`}))
	var se *StartError
	if !errors.As(err, &se) || !slices.Contains(se.Lines, "ValueError: Batch-size ranges must be non-overlapping and sorted.") {
		t.Fatalf("overlapping ranges: err %v", err)
	}
}
