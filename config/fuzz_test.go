package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse: any text gives a config or a *Error listing problems (or a
// syntax error), never a panic, and a problem list is never empty.
func FuzzParse(f *testing.F) {
	f.Add(minimal)
	if b, err := os.ReadFile("../deploy/opsbot.example.yaml"); err == nil {
		f.Add(string(b))
	}
	f.Add("slack: xoxb-1234567890-SECRETVALUE\n")
	f.Add("a: &a [1, 2]\nb: &b [*a, *a]\nservices: {q: {gpus: *b}}\n")
	f.Add("hosts: &h {gpu1: *h}\n")
	f.Add("- 1\n- 2\n")
	f.Add("limits: {max_steps: 0x10, job_timeout: 1h}\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := Parse([]byte(text), "/etc/opsbot", env(map[string]string{"T": "x"}))
		if err == nil {
			if c == nil {
				t.Fatal("nil config without an error")
			}
			return
		}
		var ce *Error
		if errors.As(err, &ce) && len(ce.Problems) == 0 {
			t.Fatal("a *Error without problems")
		}
		if strings.Contains(err.Error(), "config.") {
			t.Errorf("error speaks Go types: %v", err)
		}
	})
}
