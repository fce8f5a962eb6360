package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
)

// knownHostsOf returns the known_hosts path a lab config names.
func knownHostsOf(t *testing.T, cfgPath string) string {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.SSH.KnownHosts
}

// A known_hosts that every user may write is refused, by config check and
// at start, as a world-writable config is; a group-writable one is run with
// a warning naming the file and the fix.
func TestKnownHostsWritableByOthers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := labConfigWithAuth(t, ctx, "auth:\n  default_role: admin")
	kh := knownHostsOf(t, cfg)

	if err := os.Chmod(kh, 0o646); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := configCheck(t, "config", "check", "--config", cfg)
	want := "ssh.known_hosts: " + kh + " is writable by every user (mode 0646)"
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "chmod o-w "+kh) || stdout != "" {
		t.Fatalf("config check with a world-writable known_hosts: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1 and %q", code, stdout, stderr, want)
	}
	var out, errb bytes.Buffer
	code = run(ctx, []string{"run", "--config", cfg, "svc status"}, strings.NewReader(""), &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), want) || strings.Contains(out.String(), "active") {
		t.Fatalf("run with a world-writable known_hosts: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}

	if err := os.Chmod(kh, 0o664); err != nil {
		t.Fatal(err)
	}
	warn := "warning: ssh.known_hosts: " + kh + " is writable by its group (mode 0664)"
	code, stdout, stderr = configCheck(t, "config", "check", "--config", cfg)
	if code != 0 || !strings.Contains(stderr, warn) || !strings.Contains(stderr, "chmod g-w "+kh) || !strings.Contains(stdout, "valid") {
		t.Fatalf("config check with a group-writable known_hosts: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0 and %q", code, stdout, stderr, warn)
	}
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"run", "--config", cfg, "svc status"}, strings.NewReader(""), &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "writable by its group") {
		t.Fatalf("run with a group-writable known_hosts: exit %d, want 0 and a warning\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}

	if err := os.Chmod(kh, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := configCheck(t, "config", "check", "--config", cfg); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("config check with a 0644 known_hosts: exit %d, stderr:\n%s\nwant exit 0 and no warning", code, stderr)
	}
}

// A secret others may read gets a warning naming the file and chmod 600: a
// literal in a config readable by others, or a variable the config takes
// through ${ENV} assigned in the environment file beside it (the unit's
// EnvironmentFile=). The same secrets in files only their owner reads, or a
// readable config holding only references, get none.
func TestSecretsReadableByOthersWarned(t *testing.T) {
	const token = "xoxb-1234-LITERALSECRET"
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	enableSlack := func(s string) string {
		return strings.Replace(s, "enabled: false", "enabled: true", 1)
	}
	t.Setenv("SLACK_APP_TOKEN", "xapp-1-FROMTHEENV")

	literal := exampleIn(t, dir, func(s string) string {
		return strings.Replace(enableSlack(s), "${SLACK_BOT_TOKEN}", token, 1)
	})
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o640, true}, {0o600, false}} {
		if err := os.Chmod(literal, c.mode); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := configCheck(t, "config", "check", "--config", literal)
		want := literal + " holds a literal secret (slack.bot_token) and is readable by others than its owner"
		if code != 0 || strings.Contains(stderr, want) != c.warn || c.warn && !strings.Contains(stderr, "chmod 600 "+literal) {
			t.Errorf("literal secret, config mode %04o: exit %d, want 0 and warning=%v (%q)\nstdout:\n%s\nstderr:\n%s", c.mode, code, c.warn, want, stdout, stderr)
		}
		if strings.Contains(stderr+stdout, "LITERALSECRET") || strings.Contains(stderr+stdout, "FROMTHEENV") {
			t.Errorf("a secret is shown:\n%s%s", stdout, stderr)
		}
	}

	t.Setenv("SLACK_BOT_TOKEN", token)
	ref := exampleIn(t, dir, enableSlack)
	if err := os.Chmod(ref, 0o644); err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(dir, config.EnvFileName)
	if err := os.WriteFile(env, []byte("# opsbot's secrets\nSLACK_BOT_TOKEN="+token+"\nSLACK_APP_TOKEN=\"xapp-1-FROMTHEENV\"\nOTHER=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := configCheck(t, "config", "check", "--config", ref)
	want := env + " holds secrets (SLACK_BOT_TOKEN, SLACK_APP_TOKEN) and is readable by others than its owner (mode 0644): run: chmod 600 " + env
	if code != 0 || !strings.Contains(stderr, want) || strings.Contains(stderr, ref+" holds") {
		t.Fatalf("env file 0644: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0 and only %q", code, stdout, stderr, want)
	}
	if err := os.Chmod(env, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := configCheck(t, "config", "check", "--config", ref); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("env file 0600, config with references only: exit %d, want 0 and no warning:\n%s", code, stderr)
	}
}

// A key the process may not read is an error naming the user opsbot runs as
// and the one recipe. Run as uid 65532 (the Dockerfile's user, with no name
// on this machine) against a key only root may read.
func TestKeyUnreadableNamesTheUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run opsbot as another user")
	}
	dir := t.TempDir()
	key, _ := writeSSHFiles(t, dir, 0o600)
	cfg := exampleIn(t, dir, nil)
	// Let uid 65532 reach the config, known_hosts and a copy of this test
	// binary, but not the key.
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{cfg, filepath.Join(dir, "known_hosts")} {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "opsbot.test")
	copyFile(t, os.Args[0], bin, 0o755)

	cmd := exec.Command(bin, "-test.run=^$", "--", "config", "check", "--config", cfg)
	cmd.Env = append(os.Environ(), "OPSBOT_TEST_MAIN=1", "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	want := "ssh.key_file: ssh key " + key + ": opsbot runs as uid 65532 and may not read it (permission denied): run: chown root:65532 " + key + " && chmod 0640 " + key
	if err == nil || !strings.Contains(stderr.String(), want) {
		t.Fatalf("config check as uid 65532: %v\nstdout:\n%s\nstderr:\n%s\nwant %q", err, stdout.String(), stderr.String(), want)
	}

	// The recipe it names works: the same check passes.
	if err := os.Chown(key, 0, 65532); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	cmd = exec.Command(bin, "-test.run=^$", "--", "config", "check", "--config", cfg)
	cmd.Env = append(os.Environ(), "OPSBOT_TEST_MAIN=1", "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), "valid") {
		t.Fatalf("config check as uid 65532 with the key 0640 root:65532: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
