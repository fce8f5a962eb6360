package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/store"
)

// labConfigWithAuth starts the lab and writes its config with auth replaced.
func labConfigWithAuth(t *testing.T, ctx context.Context, auth string) string {
	t.Helper()
	l, err := lab.Start(ctx, lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cfg, err := l.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "auth: {default_role: admin}", auth, 1)
	if text == string(b) {
		t.Fatalf("lab config has no auth line to replace:\n%s", b)
	}
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// `opsbot run --as ID` acts as another console user only when the OS user is
// an admin; the audit row names both.
func TestRunAsNeedsAdmin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	me := defaultUser()
	cfg := labConfigWithAuth(t, ctx, fmt.Sprintf("auth: {users: {%q: operator, \"console:alice\": admin}}", "console:"+me))
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "--config", cfg, "--json", "--as", "alice", "svc status"}, strings.NewReader(""), &out, &errb)
	var l runLine
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("output %q: %v\n%s", out.String(), err, errb.String())
	}
	if code != 1 || l.Job == nil || l.Job.Status != "refused" || l.Error == nil || !strings.Contains(*l.Error, "admin") {
		t.Fatalf("operator running --as alice: exit %d, %+v", code, l)
	}
	// As themselves, the same command runs.
	out.Reset()
	if code := run(ctx, []string{"run", "--config", cfg, "--json", "svc status"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("as themselves: exit %d\n%s%s", code, out.String(), errb.String())
	}

	cfg = labConfigWithAuth(t, ctx, fmt.Sprintf("auth: {users: {%q: admin, \"console:alice\": viewer}}", "console:"+me))
	out.Reset()
	if code := run(ctx, []string{"run", "--config", cfg, "--json", "--as", "alice", "svc status"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("admin running --as alice: exit %d\n%s%s", code, out.String(), errb.String())
	}
	st, err := store.Open(ctx, filepath.Join(filepath.Dir(cfg), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.Audit(ctx, store.AuditFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("console:%s as console:alice", me)
	if len(rows) != 1 || rows[0].User != "alice" || !strings.Contains(rows[0].Detail, want) || rows[0].JobID == 0 {
		t.Fatalf("audit %+v: want one row for alice naming %q with its job", rows, want)
	}
}

// `opsbot demo` reads a line of any length: one over the limit is answered
// "line too long" and the commands after it still run; it exits 0.
func TestDemoLineTooLong(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	in := "mtp show\n" + strings.Repeat("gpu status ", 200_000) + "\ngpu status\n"
	if code := run(ctx, []string{"demo"}, strings.NewReader(in), &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	for _, want := range []string{"line too long (2200000 bytes", "✅ #1 `mtp show qwen` — succeeded", "✅ #2 `gpu status` — succeeded"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
