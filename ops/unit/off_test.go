package unit

import (
	"slices"
	"strings"
	"testing"
)

// Steps 0 takes every speculative option out with its value and the
// separator before it, and changes no other byte: in continuation style, on
// one line, in =value form, abbreviated, in vLLM's JSON and in its older
// options; a unit without speculation needs nothing.
func TestSetStepsZeroRemovesSpeculation(t *testing.T) {
	t.Parallel()
	incident := readTestdata(t, "sglang-incident.service")
	tests := []struct {
		name, in, want string
	}{
		{"continuation lines", incident, strings.Replace(incident,
			"    --speculative-algo NEXTN \\\n    --speculative-num-steps 3 \\\n    --speculative-eagle-topk 1 \\\n    --speculative-num-draft-tokens 4 \\\n", "", 1)},
		{"one line, =value, abbreviated", readTestdata(t, "sglang-inline-eq.service"), strings.Replace(readTestdata(t, "sglang-inline-eq.service"),
			" \\\n  --speculative-algorithm=EAGLE --speculative-num-step=2 --speculative-eagle-topk=1 --speculative-num-d=3", "", 1)},
		{"draft model on one line", readTestdata(t, "sglang-topk4.service"), strings.Replace(readTestdata(t, "sglang-topk4.service"),
			" --speculative-algo EAGLE --speculative-draft-model-path /models/EAGLE-LLaMA3.1 --speculative-num-steps 5 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8", "", 1)},
		{"an abbreviation several draft options share, and the adaptive flags",
			"[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --speculative-algorithm EAGLE --model-path /m --speculative-draft /d " +
				"--speculative-adaptive --speculative-num-steps 3 --speculative-adaptive-config=/etc/a.json --max-running-requests 64\n",
			"[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m --max-running-requests 64\n"},
		{"vllm JSON in single quotes", readTestdata(t, "vllm-serve.service"), strings.Replace(readTestdata(t, "vllm-serve.service"),
			" \\\n    --speculative-config '{\"method\":\"qwen3_next_mtp\",\"num_speculative_tokens\":2}'", "", 1)},
		{"vllm JSON with $$ and %%, = form", readTestdata(t, "vllm-api-server.service"), strings.Replace(readTestdata(t, "vllm-api-server.service"),
			" \\\n  --speculative-config=\"{\\\"method\\\": \\\"deepseek_mtp\\\", \\\"num_speculative_tokens\\\": 1, \\\"draft_note\\\": \\\"cost $$5 at 100%%\\\"}\"", "", 1)},
		{"vllm's older options", "[Service]\nExecStart=vllm serve m --speculative-model /d --num-speculative-tokens 4 --port 8000\n",
			"[Service]\nExecStart=vllm serve m --port 8000\n"},
		{"already off", "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m\n",
			"[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /m\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := SetSteps(tt.in, 0, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if e.After != tt.want {
				t.Fatalf("after:\n%s\nwant:\n%s", e.After, tt.want)
			}
			if e.SpecAfter.Present || e.SpecAfter.DraftSteps() != 0 || len(e.SpecAfter.Uses) != 0 {
				t.Errorf("spec after %+v", e.SpecAfter)
			}
			// Every other word of the command line stays, in order.
			var kept []string
			for i := 0; i < len(e.ArgvBefore); i++ {
				w := e.ArgvBefore[i]
				name, _, eq := strings.Cut(w, "=")
				if strings.HasPrefix(name, "--speculative") || name == "--num-speculative-tokens" {
					if !eq && name != FlagAdaptive {
						i++
					}
					continue
				}
				kept = append(kept, w)
			}
			if !slices.Equal(e.ArgvAfter, kept) {
				t.Errorf("argv after %q, want %q", e.ArgvAfter, kept)
			}
			if (e.After == e.Before) != (len(e.Changed) == 0) {
				t.Errorf("changes %+v for a text that changed: %v", e.Changed, e.After != e.Before)
			}
			// What steps 0 replaced is what mtp undo writes back: the text before.
			if back, err := SetSteps(e.Before, 3, Options{}); tt.name != "already off" && (err != nil || back.SpecAfter.DraftSteps() != 3) {
				t.Errorf("the text before does not run speculation again: %v", err)
			}
		})
	}
}

// SGLang's default adaptive table: the flag added in the unit's style, a
// config path taken out; the steps stay one of the table's candidates.
func TestSetStepsAdaptiveDefault(t *testing.T) {
	t.Parallel()
	incident := readTestdata(t, "sglang-incident.service")
	e, err := SetSteps(incident, 3, Options{AdaptiveDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(incident, "    --speculative-num-draft-tokens 4 \\\n", "    --speculative-num-draft-tokens 4 \\\n    --speculative-adaptive \\\n", 1)
	if e.After != want || !e.SpecAfter.Adaptive || e.SpecAfter.AdaptiveConfig != "" {
		t.Fatalf("after:\n%s\nwant:\n%s", e.After, want)
	}
	file, err := SetSteps(incident, 3, Options{AdaptiveConfig: "/etc/sglang/a.json"})
	if err != nil {
		t.Fatal(err)
	}
	back, err := SetSteps(file.After, 3, Options{AdaptiveDefault: true})
	if err != nil || back.After != want {
		t.Fatalf("from a config file to the default table: %v\n%s\nwant:\n%s", err, back.After, want)
	}
}
