package unit

import (
	"os"
	"strings"
	"testing"
)

// The example engine units in deploy/ are what we tell people to start from:
// opsbot must be able to read and edit them.
func TestDeployExamplesEdit(t *testing.T) {
	for file, want := range map[string]string{
		"../../deploy/sglang-qwen.service": "--speculative-num-steps 10",
		"../../deploy/vllm-qwen.service":   `"num_speculative_tokens":10`,
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		e, err := SetSteps(string(b), 10, Options{})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !strings.Contains(e.After, want) || e.SpecAfter.DraftSteps() != 10 {
			t.Fatalf("%s: edit lacks %s:\n%s", file, want, e.After)
		}
	}
}
