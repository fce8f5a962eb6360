package engine

import (
	"errors"
	"strings"
	"testing"
)

func vllmArgv(flags string) []string {
	return append([]string{"/opt/vllm/.venv/bin/vllm", "serve", "/models/Q"}, strings.Fields(flags)...)
}

// vLLM refuses a GPU memory share outside (0, 1] and a batch of no
// sequences when it builds its config (pydantic's gt/le/ge on CacheConfig
// and SchedulerConfig); the bounds themselves start.
func TestCheckVLLMConfigBounds(t *testing.T) {
	for _, c := range []struct {
		flags, says string
	}{
		{"--gpu-memory-utilization 1.2", "validation error for CacheConfig"},
		{"--gpu-memory-utilization 0", "validation error for CacheConfig"},
		{"--max-num-seqs 0", "validation error for SchedulerConfig"},
	} {
		_, _, err := Check(mustParse(t, vllmArgv(c.flags)))
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(strings.Join(se.Lines, "\n"), c.says) {
			t.Errorf("%s: %v, want a start error saying %q", c.flags, err, c.says)
		}
	}
	for _, flags := range []string{"--gpu-memory-utilization 1", "--gpu-memory-utilization 0.05", "--max-num-seqs 1"} {
		if _, _, err := Check(mustParse(t, vllmArgv(flags))); err != nil {
			t.Errorf("%s refused: %v", flags, err)
		}
	}
}
