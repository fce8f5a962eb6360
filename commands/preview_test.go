package commands

import (
	"strings"
	"testing"
)

// mtp per-load's confirmation names every file the change writes, in the
// order it writes them, from the configuration: SGLang's adaptive config
// file, then the unit; vLLM's unit alone. Without what the configuration
// says it falls back to the words of Preview.
func TestPerLoadPreviewNamesEveryFile(t *testing.T) {
	opts := Options{Services: []ServiceRef{
		{Name: "qwen", Host: "gpu1", Unit: "sglang-qwen.service", Engine: "sglang", Adaptive: "/etc/sglang/qwen-adaptive.json"},
		{Name: "llama", Host: "gpu2", Unit: "vllm-llama.service", Engine: "vllm"},
		{Name: "bare", Host: "gpu2"},
	}}
	cases := []struct{ text, want string }{
		{"mtp per-load qwen 1:7 8:5", "write two files: SGLang's adaptive config /etc/sglang/qwen-adaptive.json, then the unit sglang-qwen.service " +
			"(--speculative-adaptive and its config), start it, wait until it serves, verify it runs per load and benchmark at each concurrency. " +
			"If it does not serve, the unit and the file are put back. (`mtp per-load qwen 1:7 8:5 --dry-run` shows each file's diff.)"},
		{"mtp per-load llama 1:3 8:2", "write the unit vllm-llama.service (the per-batch table in --speculative-config), start it"},
		{"mtp per-load bare 1:3", "write its per-load configuration (SGLang: the adaptive config file next to the unit"},
	}
	for _, c := range cases {
		cmd, err := Parse(c.text, opts)
		if err != nil {
			t.Fatalf("%s: %v", c.text, err)
		}
		if got := PreviewIn(cmd, opts); !strings.Contains(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.text, got, c.want)
		}
	}
	// Commands without a preview of their own keep theirs.
	cmd, err := Parse("svc stop qwen", opts)
	if err != nil {
		t.Fatal(err)
	}
	if PreviewIn(cmd, opts) != PreviewOf(cmd) {
		t.Errorf("svc stop: %q, want %q", PreviewIn(cmd, opts), PreviewOf(cmd))
	}
}

// mtp undo's confirmation names every file it may restore, in the order it
// writes them: SGLang's adaptive config beside the unit, then the unit;
// vLLM's unit alone.
func TestUndoPreviewNamesEveryFile(t *testing.T) {
	opts := Options{Services: []ServiceRef{
		{Name: "qwen", Host: "gpu1", Unit: "sglang-qwen.service", Engine: "sglang", Adaptive: "/etc/sglang/qwen-adaptive.json"},
		{Name: "llama", Host: "gpu2", Unit: "vllm-llama.service", Engine: "vllm"},
	}}
	cases := []struct{ text, want string }{
		{"mtp undo qwen", "put back two files: SGLang's adaptive config /etc/sglang/qwen-adaptive.json (removed instead when that change created it), " +
			"then the unit sglang-qwen.service, that qwen's last successful change replaced: stop qwen on gpu1, clear its GPU memory, " +
			"write /etc/sglang/qwen-adaptive.json, then sglang-qwen.service, start it"},
		{"mtp undo llama", "put back the text of the unit vllm-llama.service that llama's last successful change replaced: stop llama on gpu2, " +
			"clear its GPU memory, write the unit vllm-llama.service, start it"},
	}
	for _, c := range cases {
		cmd, err := Parse(c.text, opts)
		if err != nil {
			t.Fatalf("%s: %v", c.text, err)
		}
		if got := PreviewIn(cmd, opts); !strings.Contains(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.text, got, c.want)
		}
	}
}
