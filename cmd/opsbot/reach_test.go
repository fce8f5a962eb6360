package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/store"
)

// TestConfigCheckNamesHostsWithoutKnownKey: a host whose address has no
// entry in known_hosts fails config check (every job on it would fail at its
// first connection), named by its key with the exact ssh-keyscan line: -p
// for a port other than 22, run on the jump host for a host behind one. With
// the entries those lines write, the check passes.
func TestConfigCheckNamesHostsWithoutKnownKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, kh := writeSSHFiles(t, dir, 0o600) // keys for gpu1.example.internal and pve.example.internal, port 22
	path := exampleIn(t, dir, func(s string) string {
		s = strings.Replace(s, `gpu1: {addr: "gpu1.example.internal:22"`, `gpu1: {addr: "gpu1.example.internal:2222"`, 1)
		return strings.Replace(s, "\nservices:\n", "\n  gpu9: {addr: \"10.0.0.9:22\", user: root, jump: pve}\nservices:\n", 1)
	})
	code, stdout, stderr := configCheck(t, "config", "check", "--config", path)
	ps := problems(stderr)
	want := []string{
		"hosts.gpu1: " + kh + " has no key for gpu1.example.internal:2222, so every job on gpu1 fails at its first connection: " +
			"add it with `ssh-keyscan -p 2222 gpu1.example.internal >> " + kh + "`",
		"hosts.gpu9: " + kh + " has no key for 10.0.0.9:22, so every job on gpu9 fails at its first connection: " +
			"add it with `ssh root@pve.example.internal 'ssh-keyscan 10.0.0.9' >> " + kh + "`",
	}
	if code != 1 || stdout != "" || len(ps) != len(want) {
		t.Fatalf("exit %d, %d problems\nstdout:\n%s\nstderr:\n%s\nwant exit 1 and exactly gpu1 and gpu9 named", code, len(ps), stdout, stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(ps[i], w) || !strings.Contains(ps[i], "fingerprint out of band") {
			t.Errorf("problem %d:\n%s\nwant it to start with:\n%s", i, ps[i], w)
		}
	}

	// What those commands append: [host]:port for the port, the bare address on 22.
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(kh, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	_, err = f.WriteString("[gpu1.example.internal]:2222 " + line + "\n10.0.0.9 " + line + "\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := configCheck(t, "config", "check", "--config", path); code != 0 || !strings.Contains(stdout, "valid") {
		t.Fatalf("with the entries: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestConfigCheckPrintsValuesAsWritten: durations print as the operator
// writes them (90d, 15m, 30s), never as Go's 2160h0m0s, and a service's
// via_ssh shows.
func TestConfigCheckPrintsValuesAsWritten(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	path := exampleIn(t, dir, func(s string) string {
		return strings.Replace(s, "    via_ssh: false", "    via_ssh: true", 1)
	})
	code, stdout, stderr := configCheck(t, "config", "check", "--config", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"retention: 90d\n", "ready_timeout: 15m\n", "job_timeout: 30m\n", "lease_ttl: 30s\n", "keepalive: 15s\n", "via_ssh: true\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("config check does not print %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "h0m0s") || strings.Contains(stdout, "m0s") {
		t.Errorf("config check prints Go's duration form:\n%s", stdout)
	}
}

// TestBenchTakesTheConfigsLoad: `opsbot bench --config FILE --service S`
// runs the config's bench section (the load jobs run), flags given override
// it one by one, and the stored result records the load it ran.
func TestBenchTakesTheConfigsLoad(t *testing.T) {
	t.Parallel()
	url := labServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "opsbot.yaml")
	text := `store: {path: opsbot.db}
ssh: {key_file: id, known_hosts: known_hosts}
hosts: {gpu1: {addr: "127.0.0.1:22", user: root}}
services: {qwen: {host: gpu1, unit: sglang-qwen.service, url: "` + url + `"}}
bench: {prompts: 3, concurrency: 3, input_len: 16, output_len: 8}
`
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		flags []string
		want  store.Load
	}{
		{nil, store.Load{Prompts: 3, Concurrency: 3, InputLen: 16, OutputLen: 8}},
		{[]string{"--prompts", "2", "--out", "12"}, store.Load{Prompts: 2, Concurrency: 3, InputLen: 16, OutputLen: 12}},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"bench", "--config", cfg, "--service", "qwen", "--json"}, c.flags...)
		if code := run(ctx, args, strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, errb.String())
		}
		var res struct {
			Settings struct {
				Prompts     int `json:"prompts"`
				Concurrency int `json:"concurrency"`
				InputLen    int `json:"input_len"`
				OutputLen   int `json:"output_len"`
			} `json:"settings"`
			OutputTokens int `json:"output_tokens"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		s := res.Settings
		if got := (store.Load{Prompts: s.Prompts, Concurrency: s.Concurrency, InputLen: s.InputLen, OutputLen: s.OutputLen}); got != c.want ||
			res.OutputTokens != c.want.Prompts*c.want.OutputLen {
			t.Errorf("%q ran %+v (%d tokens out), want %+v", c.flags, got, res.OutputTokens, c.want)
		}
	}
	st, err := store.Open(ctx, filepath.Join(dir, "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hist, err := st.BenchHistory(ctx, "qwen", 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("stored %+v, %v; want 2 results", hist, err)
	}
	for _, h := range hist {
		if h.Concurrency != 3 || h.InputLen != 16 {
			t.Errorf("stored load %+v, want the config's concurrency 3 and input 16", h)
		}
	}
}

// TestBenchServiceViaSSH: `opsbot bench --config FILE --service S` on a
// via_ssh service reaches an engine that listens only on its host's loopback
// through the SSH connection to that host, as jobs do.
func TestBenchServiceViaSSH(t *testing.T) {
	t.Parallel()
	l := labtest.Start(t, lab.Options{TimeScale: 1000, LoopbackEngines: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	cfg, err := l.WriteConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "engine: sglang, proxmox:", "engine: sglang, via_ssh: true, proxmox:", 1)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Topology().Services {
		if ph, _ := engine.New(s.URL).Probe(ctx); s.Name == "qwen" && ph != engine.PhaseRefused {
			t.Fatalf("qwen answers on %s from here (%s): the test would not prove the tunnel", s.URL, ph)
		}
	}
	var out, errb bytes.Buffer
	args := []string{"bench", "--config", cfg, "--service", "qwen", "--prompts", "2", "--concurrency", "2", "--in", "16", "--out", "200", "--json"}
	if code := run(ctx, args, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var res struct {
		RequestsOK int     `json:"requests_ok"`
		AcceptLen  float64 `json:"accept_len"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.RequestsOK != 2 || res.AcceptLen <= 1 {
		t.Fatalf("result %+v (%v)\n%s\n%s", res, err, out.String(), errb.String())
	}
	if n := l.Host("gpu1").Forwarded(); n < 2 {
		t.Errorf("gpu1 forwarded %d channels, want the benchmark's", n)
	}
}
