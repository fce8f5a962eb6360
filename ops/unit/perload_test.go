package unit

import (
	"errors"
	"strings"
	"testing"
)

// Per-load speculation: SGLang's adaptive flags added after the speculative options in the
// unit's style, the path replaced when present; vLLM's table set inside the JSON with every
// other byte of it untouched.
func TestSetStepsPerLoad(t *testing.T) {
	t.Parallel()
	sg := "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m \\\n" +
		"    --speculative-algorithm NEXTN \\\n    --speculative-num-steps 3 \\\n    --speculative-eagle-topk 1 \\\n" +
		"    --speculative-num-draft-tokens 4 \\\n    --port 30000\n"
	e, err := SetSteps(sg, 7, Options{AdaptiveConfig: "/etc/sglang/qwen-adaptive.json"})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(sg, "--speculative-num-steps 3", "--speculative-num-steps 7", 1)
	want = strings.Replace(want, "--speculative-num-draft-tokens 4 \\\n", "--speculative-num-draft-tokens 8 \\\n"+
		"    --speculative-adaptive \\\n    --speculative-adaptive-config /etc/sglang/qwen-adaptive.json \\\n", 1)
	if e.After != want {
		t.Fatalf("after:\n%s\nwant:\n%s", e.After, want)
	}
	if !e.SpecAfter.Adaptive || e.SpecAfter.AdaptiveConfig != "/etc/sglang/qwen-adaptive.json" {
		t.Fatalf("spec after %+v", e.SpecAfter)
	}
	// Again with another path: only the path changes.
	e2, err := SetSteps(e.After, 7, Options{AdaptiveConfig: "/etc/sglang/other.json"})
	if err != nil || e2.After != strings.Replace(e.After, "qwen-adaptive.json", "other.json", 1) || len(e2.Changed) != 1 {
		t.Fatalf("path change: %v %+v\n%s", err, e2, e2.After)
	}
	// The same again: nothing to change.
	if e3, err := SetSteps(e.After, 7, Options{AdaptiveConfig: "/etc/sglang/qwen-adaptive.json"}); err != nil || e3.After != e.After || len(e3.Changed) != 0 {
		t.Fatalf("idempotent: %v %+v", err, e3.Changed)
	}

	// A single setting takes the unit off per load: the flags go with their line.
	single, err := SetSteps(e.After, 5, Options{})
	plain, err2 := SetSteps(sg, 5, Options{})
	if err != nil || err2 != nil || single.After != plain.After || single.SpecAfter.Adaptive || single.SpecAfter.AdaptiveConfig != "" {
		t.Fatalf("single setting from per load: %v %v\n%s\nwant:\n%s", err, err2, single.After, plain.After)
	}
	inline := "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m --speculative-algorithm NEXTN --speculative-adaptive " +
		"--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-adaptive-config=/etc/a.json --port 30000\n"
	if s, err := SetSteps(inline, 3, Options{}); err != nil || !strings.Contains(s.After, "--speculative-algorithm NEXTN --speculative-num-steps 3 ") ||
		!strings.Contains(s.After, "--speculative-num-draft-tokens 4 --port 30000") {
		t.Fatalf("inline flags removed: %v\n%s", err, s.After)
	}

	vl := "[Service]\nExecStart=/opt/vllm/bin/vllm serve /m --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3, \"x\": {\"y\": 1}}' --port 8000\n"
	v, err := SetSteps(vl, 10, Options{BatchTable: "[[1,1,10],[2,8,6],[9,64,0]]"})
	if err != nil {
		t.Fatal(err)
	}
	wantV := strings.Replace(vl, `"num_speculative_tokens": 3, "x": {"y": 1}}`,
		`"num_speculative_tokens": 10, "x": {"y": 1}, "num_speculative_tokens_per_batch_size": [[1,1,10],[2,8,6],[9,64,0]]}`, 1)
	if v.After != wantV || v.SpecAfter.BatchTable != "[[1,1,10],[2,8,6],[9,64,0]]" {
		t.Fatalf("vLLM after:\n%s\nwant:\n%s", v.After, wantV)
	}
	v2, err := SetSteps(v.After, 6, Options{BatchTable: "[[1,4,6],[5,64,1]]"})
	if err != nil || v2.After != strings.Replace(strings.Replace(v.After, "[[1,1,10],[2,8,6],[9,64,0]]", "[[1,4,6],[5,64,1]]", 1),
		`"num_speculative_tokens": 10`, `"num_speculative_tokens": 6`, 1) {
		t.Fatalf("vLLM table replaced: %v\n%s", err, v2.After)
	}

	for _, base := range []string{vl, strings.Replace(vl, `{"method": "mtp", "num_speculative_tokens": 3`, `{"num_speculative_tokens_per_batch_size": [[1,2,3]], "method": "mtp", "num_speculative_tokens": 3`, 1)} {
		with, err := SetSteps(base, 6, Options{BatchTable: "[[1,4,6],[5,64,1]]"})
		if err != nil {
			t.Fatal(err)
		}
		back, err := SetSteps(with.After, 3, Options{})
		if err != nil || back.After != vl || back.SpecAfter.BatchTable != "" {
			t.Fatalf("table removed: %v\n%s\nwant:\n%s", err, back.After, vl)
		}
	}

	for _, tc := range []struct {
		text string
		opts Options
		code Code
	}{
		{strings.Replace(sg, "--speculative-eagle-topk 1", "--speculative-eagle-topk 2", 1), Options{AdaptiveConfig: "/etc/a.json", DraftTokens: 8}, CodeRejected},
		{sg, Options{AdaptiveConfig: "/etc/a b.json"}, CodeInvalid},
		{sg, Options{AdaptiveConfig: "/etc/$X.json"}, CodeInvalid},
		{sg, Options{BatchTable: "[[1,1,3]]"}, CodeUnsupported},
		{vl, Options{AdaptiveConfig: "/etc/a.json"}, CodeUnsupported},
	} {
		if _, err := SetSteps(tc.text, 7, tc.opts); !errors.Is(err, &Error{Code: tc.code}) {
			t.Errorf("%+v: err %v, want code %v", tc.opts, err, tc.code)
		}
	}
}

// SGLang's cap of 48 running requests with speculation is raised with the
// per-load flags, in the unit's style, only when the command line does not
// set it already; vLLM refuses the option.
func TestSetStepsMaxRunningRequests(t *testing.T) {
	t.Parallel()
	sg := "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m \\\n" +
		"    --speculative-algorithm NEXTN \\\n    --speculative-num-steps 3 \\\n    --speculative-eagle-topk 1 \\\n" +
		"    --speculative-num-draft-tokens 4 \\\n    --port 30000\n"
	e, err := SetSteps(sg, 7, Options{AdaptiveConfig: "/etc/a.json", MaxRunningRequests: 64})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(sg, "--speculative-num-steps 3", "--speculative-num-steps 7", 1)
	want = strings.Replace(want, "--speculative-num-draft-tokens 4 \\\n", "--speculative-num-draft-tokens 8 \\\n"+
		"    --speculative-adaptive \\\n    --speculative-adaptive-config /etc/a.json \\\n    --max-running-requests 64 \\\n", 1)
	if e.After != want {
		t.Fatalf("after:\n%s\nwant:\n%s", e.After, want)
	}
	if !strings.Contains(e.Diff, "+    --max-running-requests 64 \\") {
		t.Errorf("the diff does not show the raised cap:\n%s", e.Diff)
	}
	// --flag=value style is kept.
	inline := "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m --speculative-algorithm=NEXTN " +
		"--speculative-num-steps=3 --speculative-eagle-topk=1 --speculative-num-draft-tokens=4 --port 30000\n"
	if s, err := SetSteps(inline, 3, Options{MaxRunningRequests: 64}); err != nil ||
		!strings.Contains(s.After, "--speculative-num-draft-tokens=4 --max-running-requests=64 --port 30000") {
		t.Fatalf("inline: %v\n%s", err, s.After)
	}
	// Set already (in full or abbreviated): its value stays, nothing is added.
	for _, set := range []string{"--max-running-requests 32", "--max-running-requests=32", "--max-running 32"} {
		text := strings.Replace(sg, "--port 30000", set+" --port 30000", 1)
		s, err := SetSteps(text, 3, Options{MaxRunningRequests: 64})
		if err != nil || s.After != text || len(s.Changed) != 0 {
			t.Errorf("%s: %v %+v\n%s", set, err, s, s.After)
		}
	}
	vl := "[Service]\nExecStart=/opt/vllm/bin/vllm serve /m --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}' --port 8000\n"
	if _, err := SetSteps(vl, 3, Options{MaxRunningRequests: 64}); !errors.Is(err, &Error{Code: CodeUnsupported}) {
		t.Errorf("vLLM: err %v, want unsupported", err)
	}
	if _, err := SetSteps(sg, 3, Options{MaxRunningRequests: -1}); !errors.Is(err, &Error{Code: CodeOutOfRange}) {
		t.Errorf("-1: err %v, want out of range", err)
	}
}

// SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND: a per-load edit that asks for it inserts
// one Environment= line right above the engine's ExecStart= and nothing else; the unit reads
// it back; any other SGLang edit removes exactly that line, giving back the text byte for
// byte; a unit that sets it another way is refused where the edit wants it off.
func TestSetStepsSkipZeroDraftExtend(t *testing.T) {
	t.Parallel()
	sg := "[Unit]\nDescription=q\n\n[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m \\\n" +
		"    --speculative-algorithm NEXTN \\\n    --speculative-num-steps 3 \\\n    --speculative-eagle-topk 1 \\\n" +
		"    --speculative-num-draft-tokens 4 \\\n    --port 30000\nRestart=always\n"
	plain, err := SetSteps(sg, 7, Options{AdaptiveConfig: "/etc/sglang/q.json"})
	if err != nil {
		t.Fatal(err)
	}
	on, err := SetSteps(sg, 7, Options{AdaptiveConfig: "/etc/sglang/q.json", SkipZeroDraftExtend: true})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(plain.After, "ExecStart=", "Environment=SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1\nExecStart=", 1)
	if on.After != want || !on.SpecAfter.SkipZeroDraftExtend || plain.SpecAfter.SkipZeroDraftExtend {
		t.Fatalf("with the switch:\n%s\nwant:\n%s (spec %v)", on.After, want, on.SpecAfter.SkipZeroDraftExtend)
	}
	if again, err := SetSteps(on.After, 7, Options{AdaptiveConfig: "/etc/sglang/q.json", SkipZeroDraftExtend: true}); err != nil || again.After != on.After {
		t.Fatalf("again: %v\n%s", err, again.After)
	}
	for _, o := range []Options{{AdaptiveConfig: "/etc/sglang/q.json"}, {}} {
		back, err := SetSteps(on.After, 7, o)
		want, err2 := SetSteps(sg, 7, o)
		if err != nil || err2 != nil || back.After != want.After || back.SpecAfter.SkipZeroDraftExtend {
			t.Fatalf("%+v from the switch on: %v %v\n%s\nwant:\n%s", o, err, err2, back.After, want.After)
		}
	}
	byHand := strings.Replace(sg, "Environment=CUDA_VISIBLE_DEVICES=0", "Environment=CUDA_VISIBLE_DEVICES=0 SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=true", 1)
	var ue *Error
	if _, err := SetSteps(byHand, 7, Options{AdaptiveConfig: "/etc/sglang/q.json"}); !errors.As(err, &ue) || ue.Code != CodeRejected {
		t.Fatalf("set by hand, wanted off: %v", err)
	}
	if e, err := SetSteps(byHand, 7, Options{AdaptiveConfig: "/etc/sglang/q.json", SkipZeroDraftExtend: true}); err != nil || strings.Count(e.After, "SKIP_ZERO") != 1 {
		t.Fatalf("set by hand, wanted on: %v\n%s", err, e.After)
	}
}
