package engine

import (
	"errors"
	"strings"
	"testing"
)

func mustParse(t *testing.T, argv []string) Settings {
	t.Helper()
	s, err := ParseArgv(argv)
	if err != nil {
		t.Fatalf("parse %q: %v", argv, err)
	}
	return s
}

func TestCheckSGLang(t *testing.T) {
	tests := []struct {
		name                string
		flags               string
		steps, topk, draft  int
		algo                string
		maxRunning          int
		wantLines           []string // substrings, in order
		wantNoAdjust, noCap bool
	}{
		{name: "topk 1 forces draft = steps+1", flags: "--speculative-algorithm NEXTN --speculative-num-steps 10 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
			steps: 10, topk: 1, draft: 11, algo: "EAGLE", maxRunning: 48, wantLines: []string{AdjustDraftLine, "Max running requests is reset to 48"}},
		{name: "already consistent", flags: "--speculative-algo NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --max-running-requests 256",
			steps: 3, topk: 1, draft: 4, algo: "EAGLE", maxRunning: 256},
		{name: "auto defaults", flags: "--speculative-algorithm EAGLE3", steps: 3, topk: 1, draft: 4, algo: "EAGLE3", maxRunning: 48,
			wantLines: []string{"Max running requests is reset to 48"}},
		{name: "topk 2 keeps draft", flags: "--speculative-algorithm EAGLE --speculative-num-steps 4 --speculative-eagle-topk 2 --speculative-num-draft-tokens 6 --max-running-requests 10",
			steps: 4, topk: 2, draft: 6, algo: "EAGLE", maxRunning: 10},
		{name: "no speculation", flags: "--max-running-requests 7", maxRunning: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := mustParse(t, sglangArgv("--model-path /models/Qwen3.5-122B-A10B "+tc.flags))
			s, lines, err := Check(in)
			if err != nil {
				t.Fatal(err)
			}
			if s.Steps != tc.steps || s.TopK != tc.topk || s.DraftTokens != tc.draft || s.Algorithm != tc.algo || s.MaxRunningRequests != tc.maxRunning {
				t.Fatalf("got steps %d topk %d draft %d algo %q max running %d", s.Steps, s.TopK, s.DraftTokens, s.Algorithm, s.MaxRunningRequests)
			}
			if len(lines) != len(tc.wantLines) {
				t.Fatalf("lines %q, want %q", lines, tc.wantLines)
			}
			for i, w := range tc.wantLines {
				if !strings.Contains(lines[i], w) || !strings.HasPrefix(lines[i], "[20") {
					t.Fatalf("line %d %q, want %q with a timestamp", i, lines[i], w)
				}
			}
			if tc.algo != "" && (s.Args["speculative_num_draft_tokens"] != tc.draft || s.Args["speculative_algorithm"] != tc.algo) {
				t.Fatalf("args not updated: %v", s.Args)
			}
			if strings.Contains(tc.flags, "NEXTN") && in.Args["speculative_algorithm"] != "NEXTN" {
				t.Fatal("Check modified its input's Args")
			}
		})
	}
}

func TestCheckLlamaAutoDefaults(t *testing.T) {
	s, _, err := Check(mustParse(t, sglangArgv("--model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE --speculative-draft-model-path /d")))
	if err != nil {
		t.Fatal(err)
	}
	if s.Steps != 5 || s.TopK != 4 || s.DraftTokens != 8 {
		t.Fatalf("llama auto defaults %d,%d,%d, want 5,4,8", s.Steps, s.TopK, s.DraftTokens)
	}
}

func TestCheckSGLangStartErrors(t *testing.T) {
	tests := []struct{ flags, last string }{
		{"--speculative-algorithm NEXTN --speculative-num-steps 10", "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'"},
		{"--speculative-algorithm NEXTN --speculative-num-steps 10 --speculative-eagle-topk 1", "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'"},
		{"--speculative-algorithm NEXTN --speculative-num-steps 10 --speculative-num-draft-tokens 11", "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'"},
		{"--speculative-algorithm NEXTN --speculative-eagle-topk 1", "AssertionError"},
		{"--speculative-algorithm NEXTN --speculative-num-steps 33 --speculative-eagle-topk 1 --speculative-num-draft-tokens 34", "ValueError: speculative_num_steps must be between 1 and 32, got 33"},
		{"--speculative-algorithm NEXTN --speculative-num-steps 0 --speculative-eagle-topk 1 --speculative-num-draft-tokens 1", "ValueError: speculative_num_steps must be between 1 and 32, got 0"},
		{"--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 0 --speculative-num-draft-tokens 4", "ValueError: speculative_eagle_topk must be between 1 and 64, got 0"},
	}
	for _, tc := range tests {
		t.Run(tc.flags, func(t *testing.T) {
			_, _, err := Check(mustParse(t, sglangArgv("--model-path /m "+tc.flags)))
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *StartError", err)
			}
			if se.ExitStatus != 1 || se.Lines[0] != "Traceback (most recent call last):" || se.Lines[len(se.Lines)-1] != tc.last {
				t.Fatalf("exit %d:\n%s", se.ExitStatus, strings.Join(se.Lines, "\n"))
			}
			if !strings.Contains(strings.Join(se.Lines, "\n"), `File "/opt/sglang/.venv/lib/python3.12/site-packages/sglang/srt/server_args.py"`) {
				t.Fatalf("traceback does not name server_args.py in the venv:\n%s", strings.Join(se.Lines, "\n"))
			}
		})
	}
}

func TestCheckVLLM(t *testing.T) {
	vllm := func(cfg string) []string {
		return []string{"/opt/vllm/.venv/bin/vllm", "serve", "/m", "--speculative-config", cfg}
	}
	tests := []struct {
		argv       []string
		algo       string
		steps      int
		warn, fail string
	}{
		{argv: vllm(`{"method":"mtp","num_speculative_tokens":3}`), algo: "mtp", steps: 3},
		{argv: vllm(`{"method":"deepseek_mtp","num_speculative_tokens":2}`), algo: "mtp", steps: 2, warn: "method `deepseek_mtp` is deprecated and replaced with mtp."},
		{argv: vllm(`{"method":"qwen3_next_mtp","num_speculative_tokens":4}`), algo: "mtp", steps: 4, warn: "replaced with mtp"},
		{argv: vllm(`{"method":"mtp"}`), algo: "mtp", steps: 1},
		{argv: vllm(`{"method":"magic","num_speculative_tokens":3}`), fail: "Input should be 'ngram', 'eagle'"},
		{argv: vllm(`{"method":"mtp","num_speculative_tokens":0}`), fail: "ValueError: Expected num_speculative_tokens to be greater than zero (0)."},
		{argv: vllm(`{"method":"mtp","num_speculative_tokens":2.5}`), fail: "Input should be a valid integer"},
		{argv: vllm(`{"method":"eagle"}`), fail: "ValueError: num_speculative_tokens must be provided"},
		{argv: []string{"vllm", "serve", "/m"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.argv[2:], " "), func(t *testing.T) {
			s, lines, err := Check(mustParse(t, tc.argv))
			if tc.fail != "" {
				var se *StartError
				if !errors.As(err, &se) || se.ExitStatus != 1 || !strings.Contains(strings.Join(se.Lines, "\n"), tc.fail) {
					t.Fatalf("err = %v, want StartError with %q", err, tc.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Algorithm != tc.algo || s.Steps != tc.steps || (tc.algo != "" && s.DraftTokens != tc.steps+1) {
				t.Fatalf("%+v", s)
			}
			if (tc.warn == "") != (len(lines) == 0) || (tc.warn != "" && !strings.Contains(lines[0], tc.warn)) {
				t.Fatalf("lines %q, want %q", lines, tc.warn)
			}
			if s.MaxRunningRequests != vllmDefaultMaxNumSeqs {
				t.Fatalf("max num seqs %d", s.MaxRunningRequests)
			}
		})
	}
}
