package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/enginetest"
	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
)

// TestBenchViaSSHRefusesRedirect: `opsbot bench --config C --service qwen` on a via_ssh service
// whose engine port (behind a real OpenSSH sshd) answers "302 Location:
// http://127.0.0.1:OTHER/latest/meta-data/iam" exits 1 with output that names the 302 and the
// Location and quotes nothing the other port holds; the other port gets no request and sshd
// was asked for channels to the engine's port only. Without --model (the model lookup and the
// engine's /server_info) and with it (the benchmark's requests and the acceptance measure).
func TestBenchViaSSHRefusesRedirect(t *testing.T) {
	t.Parallel()
	s := sshdtest.StartWith(t, sshdtest.Options{DebugLog: true})
	r := enginetest.StartRedirect(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "id"), s.ClientKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(s.KnownHostsLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "opsbot.yaml")
	text := `store: {path: opsbot.db}
ssh: {key_file: id, known_hosts: known_hosts}
hosts: {gpu1: {addr: "` + s.Addr + `", user: ` + s.User + `}}
services: {qwen: {host: gpu1, unit: sglang-qwen.service, url: "` + r.Engine.URL + `", via_ssh: true}}
`
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, time.Minute)
	for _, extra := range [][]string{nil, {"--model", "m"}} {
		var out, errb bytes.Buffer
		args := append([]string{"bench", "--config", cfg, "--service", "qwen", "--prompts", "2", "--concurrency", "2", "--in", "8", "--out", "8"}, extra...)
		code := run(ctx, args, strings.NewReader(""), &out, &errb)
		if code != 1 {
			t.Errorf("%q: exit %d, want 1\n%s%s", extra, code, out.String(), errb.String())
		}
		r.CheckRefused(t, strings.Join(args, " "), out.String()+errb.String())
	}
	// Every answer closed its connection: one channel per request at least.
	testkit.WaitFor(t, 10*time.Second, "sshd's log of every channel", func() bool { return len(s.ForwardTargets()) >= int(r.EngineHits()) })
	for _, got := range s.ForwardTargets() {
		if got != r.EngineAddr() {
			t.Fatalf("sshd was asked for a channel to %s, want only %s (the engine's port): %v", got, r.EngineAddr(), s.ForwardTargets())
		}
	}
}

// TestConfigCheckRefusesURLPort: `config check` refuses a service url whose port is outside 1 to
// 65535, naming the key.
func TestConfigCheckRefusesURLPort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	for _, port := range []string{"0", "99999"} {
		path := exampleIn(t, dir, func(s string) string {
			return strings.Replace(s, "url: http://gpu1.example.internal:30000", "url: http://gpu1.example.internal:"+port, 1)
		})
		code, stdout, stderr := configCheck(t, "config", "check", "--config", path)
		want := `services.qwen.url must have a port from 1 to 65535, got "http://gpu1.example.internal:` + port + `"`
		if ps := problems(stderr); code != 1 || stdout != "" || len(ps) != 1 || ps[0] != want {
			t.Errorf("port %s: exit %d, problems %q, want 1 and exactly %q\n%s", port, code, ps, want, stderr)
		}
	}
}
