package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/store"
)

// opsbot audit export writes the chain as JSON lines; audit verify passes
// the file and the store, and names the first entry of an edited export
// (exit 1); bad flags are usage errors (exit 2).
func TestAuditExportVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	cfg := exampleIn(t, dir, nil)
	s, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-2 * time.Hour)
	for i := range 5 {
		err := s.AppendAudit(ctx, store.AuditEntry{At: t0.Add(time.Duration(i) * time.Minute), Platform: "slack", User: "UALICE",
			Command: "svc restart qwen", Decision: store.DecisionAccepted})
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	code, out, stderr := configCheck(t, "audit", "export", "--config", cfg, "--since", "3h")
	if code != 0 || strings.Count(out, "\n") != 5 || !strings.Contains(stderr, "exported 5 audit entries (ids 1..5)") {
		t.Fatalf("export: exit %d\n%s\n%s", code, out, stderr)
	}
	file := filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := configCheck(t, "audit", "verify", file); code != 0 || !strings.Contains(out, "5 entries (ids 1..5)") {
		t.Fatalf("verify FILE: exit %d\n%s\n%s", code, out, stderr)
	}
	if code, out, stderr := configCheck(t, "audit", "verify", "--config", cfg); code != 0 || !strings.Contains(out, "chained from the genesis up to the head") {
		t.Fatalf("verify --config: exit %d\n%s\n%s", code, out, stderr)
	}

	lines := strings.SplitAfter(out, "\n")
	lines[3] = strings.Replace(lines[3], "UALICE", "UMALLORY", 1)
	if err := os.WriteFile(file, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = configCheck(t, "audit", "verify", file)
	if code != 1 || !strings.Contains(stderr, "audit entry 4 (line 4) does not match the chain") {
		t.Fatalf("verify an edited FILE: exit %d\n%s", code, stderr)
	}

	for _, args := range [][]string{
		{"audit", "export", "--config", cfg},
		{"audit", "export", "--config", cfg, "--since", "yesterday"},
		{"audit", "export", "--config", cfg, "--since", "1h", "--until", "2h"},
		{"audit", "verify"},
		{"audit", "verify", file, "--config", cfg},
		{"audit", "frobnicate"},
	} {
		if code, _, stderr := configCheck(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)\n%s", args, code, stderr)
		}
	}
}
