package unit

import (
	"errors"
	"strings"
	"testing"
)

const flagSGLang = `[Service]
ExecStart=/opt/sglang/.venv/bin/python3 -m sglang.launch_server \
    --model-path /models/Q \
    --tp 4 \
    --mem-fraction-static 0.88 \
    --speculative-algorithm NEXTN \
    --speculative-num-steps 3 \
    --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 \
    --enable-metrics
Restart=always
`

const flagVLLM = `[Service]
ExecStart=/opt/vllm/.venv/bin/vllm serve /models/Q --port 8000 --gpu_memory_utilization=0.90 --max-model-len 32768 --speculative-config '{"method":"mtp","num_speculative_tokens":3}'
`

func setFlag(t *testing.T, text, name, value string) (*Edit, error) {
	t.Helper()
	u, err := Parse("x.service", text)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Merge(u)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := LookupFlag(name)
	if !ok {
		t.Fatalf("%s is not allowlisted", name)
	}
	return eff.SetFlag(f, value)
}

// Each edit changes only the flag's bytes (or adds it in the unit's style,
// or removes it with its separator), and reads back.
func TestSetFlagByteExact(t *testing.T) {
	for _, c := range []struct {
		name, text, flag, value string
		want                    string // the text after, from text by one replacement
		from, to                string
	}{
		{"replace", flagSGLang, "mem-fraction-static", "0.8", strings.Replace(flagSGLang, "static 0.88 ", "static 0.8 ", 1), "--mem-fraction-static 0.88 \\", "--mem-fraction-static 0.8 \\"},
		{"add on its own line", flagSGLang, "cuda-graph-max-bs", "16", "", "--enable-metrics\n", "--enable-metrics \\\n    --cuda-graph-max-bs 16\n"},
		{"add a switch", flagSGLang, "disable-cuda-graph", "true", "", "--enable-metrics\n", "--enable-metrics \\\n    --disable-cuda-graph\n"},
		{"remove a switch", strings.Replace(flagSGLang, "--enable-metrics\n", "--disable-cuda-graph \\\n    --enable-metrics\n", 1), "disable-cuda-graph", "false", "", "--disable-cuda-graph \\\n    --enable-metrics\n", "--enable-metrics\n"},
		{"vLLM underscores and =", flagVLLM, "gpu-memory-utilization", "0.85", "", "--gpu_memory_utilization=0.90 ", "--gpu_memory_utilization=0.85 "},
		{"vLLM add, spaced style", flagVLLM, "max-num-seqs", "64", "", "\"num_speculative_tokens\":3}'\n", "\"num_speculative_tokens\":3}' --max-num-seqs 64\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := setFlag(t, c.text, c.flag, c.value)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Replace(c.text, c.from, c.to, 1)
			if e.After != want {
				t.Errorf("after:\n%s\nwant:\n%s", e.After, want)
			}
			if e.Before != c.text || len(e.Changed) != 1 || e.SpecAfter.DraftSteps() != 3 {
				t.Errorf("edit %+v", e)
			}
			if again, err := setFlag(t, e.After, c.flag, c.value); err != nil || len(again.Changed) != 0 || again.After != e.After {
				t.Errorf("setting it again changes %+v (%v)", again, err)
			}
		})
	}
}

// Values outside a flag's range, of the wrong type, for the other engine,
// or a unit that abbreviates the flag: refused, nothing planned.
func TestSetFlagRefusals(t *testing.T) {
	for _, c := range []struct {
		text, flag, value string
		code              Code
		says              string
	}{
		{flagSGLang, "mem-fraction-static", "1", CodeOutOfRange, "above 0 and below 1"},
		{flagSGLang, "mem-fraction-static", "0", CodeOutOfRange, "above 0 and below 1"},
		{flagSGLang, "mem-fraction-static", "1e-1", CodeOutOfRange, "decimal"},
		{flagSGLang, "cuda-graph-max-bs", "0", CodeOutOfRange, "1..4096"},
		{flagSGLang, "cuda-graph-max-bs", "8.5", CodeOutOfRange, "whole number"},
		{flagSGLang, "chunked-prefill-size", "-2", CodeOutOfRange, "or -1: off"},
		{flagSGLang, "disable-cuda-graph", "maybe", CodeOutOfRange, "true or false"},
		{flagVLLM, "gpu-memory-utilization", "1.01", CodeOutOfRange, "the engine refuses to start"},
		{flagVLLM, "mem-fraction-static", "0.8", CodeUnsupported, "counterpart is --gpu-memory-utilization"},
		{strings.Replace(flagSGLang, "--mem-fraction-static", "--mem-fraction", 1), "mem-fraction-static", "0.8", CodeUnsupported, "full option name"},
		{strings.Replace(flagSGLang, "static 0.88", "static ${FRAC}", 1), "mem-fraction-static", "0.8", CodeUnsupported, "indirectly"},
	} {
		_, err := setFlag(t, c.text, c.flag, c.value)
		var ue *Error
		if !errors.As(err, &ue) || ue.Code != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s %s: %v, want code %v saying %q", c.flag, c.value, err, c.code, c.says)
		}
	}
	if _, err := setFlag(t, flagSGLang, "chunked-prefill-size", "-1"); err != nil {
		t.Errorf("-1 (chunked prefill off) refused: %v", err)
	}
}
