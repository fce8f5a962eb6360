package main

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
)

// TestOpsConfigFromTheFile: the limits the ops layer acts on come from the
// config file: limits.stranded_after as written, and its default when
// unset (the example config sets 10s; without the line, ops's own).
func TestOpsConfigFromTheFile(t *testing.T) {
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	for _, tc := range []struct {
		edit func(string) string
		want time.Duration
	}{
		{func(s string) string { return strings.Replace(s, "stranded_after: 10s", "stranded_after: 45s", 1) }, 45 * time.Second},
		{func(s string) string { return strings.Replace(s, "stranded_after: 10s", "", 1) }, ops.DefaultStrandedAfter},
	} {
		cfg, err := config.Load(exampleIn(t, dir, tc.edit))
		if err != nil {
			t.Fatal(err)
		}
		if got := opsConfig(cfg, bot.BackendDeps{}, slog.Default()).StrandedAfter; got != tc.want {
			t.Errorf("ops StrandedAfter %v, want %v", got, tc.want)
		}
	}
}
