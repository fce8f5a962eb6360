package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/store"
)

// configCheck runs `opsbot config check --config path` and returns the exit
// code, stdout and stderr.
func configCheck(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// problems returns the "  - " lines of a config error.
func problems(stderr string) []string {
	var ps []string
	for _, l := range strings.Split(stderr, "\n") {
		if p, ok := strings.CutPrefix(l, "  - "); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// writeSSHFiles writes a private key (mode keyMode) and a known_hosts file
// into dir.
func writeSSHFiles(t *testing.T, dir string, keyMode os.FileMode) (key, knownHosts string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	key = filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, keyMode); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	knownHosts = filepath.Join(dir, "known_hosts")
	line := "gpu1.example.internal,pve.example.internal " + string(ssh.MarshalAuthorizedKey(sp))
	if err := os.WriteFile(knownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return key, knownHosts
}

// exampleIn copies deploy/opsbot.example.yaml into dir with its /etc and
// /var paths moved there, and edit applied.
func exampleIn(t *testing.T, dir string, edit func(string) string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "README.md")); err != nil {
		root = "." // the test has moved to the repository root
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/opsbot.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("/etc/opsbot/", dir+"/", "/var/lib/opsbot/", dir+"/").Replace(string(b))
	if edit != nil {
		text = edit(text)
	}
	path := filepath.Join(dir, "opsbot.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadmeConfigCheck runs the README's `config check` line as written,
// from the repository root: the example config is valid, needs no secret
// for its disabled adapters, and the only problems are the two files it
// names under /etc/opsbot that a machine has only once the bot is set up
// there (the README says so). With those files in place it passes.
func TestReadmeConfigCheck(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(readme), "\n") {
		if _, cmd, ok := strings.Cut(l, "go run ./cmd/opsbot config check "); ok {
			cmd, _, _ = strings.Cut(cmd, "#")
			args = append([]string{"config", "check"}, strings.Fields(cmd)...)
			break
		}
	}
	if len(args) == 0 {
		t.Fatal("README has no `go run ./cmd/opsbot config check` line")
	}
	t.Chdir("../..")
	for _, f := range []string{"/etc/opsbot/id_ed25519", "/etc/opsbot/known_hosts"} {
		if _, err := os.Stat(f); err == nil {
			t.Skipf("%s exists on this machine: the README's expectation is for a machine without opsbot set up", f)
		}
	}
	code, stdout, stderr := configCheck(t, args...)
	ps := problems(stderr)
	if code != 1 || len(ps) != 2 || !strings.HasPrefix(ps[0], "ssh.key_file: /etc/opsbot/id_ed25519 does not exist: create the bot's key with ssh-keygen") ||
		!strings.HasPrefix(ps[1], "ssh.known_hosts: /etc/opsbot/known_hosts does not exist") {
		t.Fatalf("opsbot %s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1 and exactly the missing key and known_hosts", strings.Join(args, " "), code, stdout, stderr)
	}

	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	path := exampleIn(t, dir, nil)
	code, stdout, stderr = configCheck(t, "config", "check", "--config", path)
	if code != 0 || !strings.Contains(stdout, "valid (secrets redacted)") || strings.Contains(stdout, "SLACK_BOT_TOKEN") {
		t.Fatalf("example with its files: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestConfigCheckListsEveryProblem: one run names every problem, each by its
// key, and never shows a secret.
func TestConfigCheckListsEveryProblem(t *testing.T) {
	const token = "xoxb-98765432-TOPSECRETTOKEN"
	t.Setenv("SLACK_BOT_TOKEN", token)
	t.Setenv("SLACK_APP_TOKEN", "xapp-1-ANOTHERSECRET")
	dir := t.TempDir()
	key, _ := writeSSHFiles(t, dir, 0o644) // too open
	if err := os.Remove(filepath.Join(dir, "known_hosts")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "opsbot.db"), nil, 0o600); err != nil { // empty: not a store
		t.Fatal(err)
	}
	path := exampleIn(t, dir, func(s string) string {
		s = strings.Replace(s, "enabled: false", "enabled: true", 1) // slack
		s = strings.Replace(s, "mode: socket", "mode: webhook", 1)
		s = strings.Replace(s, "url: http://gpu1.example.internal:30000", "url: gpu1.example.internal:30000", 1)
		s = strings.Replace(s, "max_steps: 16", "max_steps: "+token, 1)
		return s
	})
	code, stdout, stderr := configCheck(t, "config", "check", "--config", path)
	if code != 1 || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 1 and nothing on stdout", code, stdout)
	}
	want := []string{
		"limits.max_steps: expected a whole number, got a string",
		"services.qwen.url must be the engine's http(s) base URL",
		"slack.mode must be http or socket",
		"ssh.key_file: ssh key " + key + " has mode 0644",
		"chmod 600 " + key,
		"ssh.known_hosts: " + filepath.Join(dir, "known_hosts") + " does not exist",
		"store.path: check store " + filepath.Join(dir, "opsbot.db") + ": empty file: not an opsbot store; move it away or delete it",
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("missing %q in:\n%s", w, stderr)
		}
	}
	if n := len(problems(stderr)); n != 6 {
		t.Errorf("%d problems listed, want 6:\n%s", n, stderr)
	}
	for _, leak := range []string{"TOPSECRET", "ANOTHERSECRET", "xoxb", "xapp"} {
		if strings.Contains(stderr, leak) {
			t.Errorf("config check shows a secret (%q):\n%s", leak, stderr)
		}
	}
}

// TestConfigCheckNamesDamagedStore: a store that SQLite finds damaged is
// named by config check, which changes nothing in it.
func TestConfigCheckNamesDamagedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	db := filepath.Join(dir, "opsbot.db")
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	path := exampleIn(t, dir, nil)
	if code, _, stderr := configCheck(t, "config", "check", "--config", path); code != 0 {
		t.Fatalf("sound store: exit %d: %s", code, stderr)
	}
	if err := os.WriteFile(db, []byte(strings.Repeat("garbage\n", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := configCheck(t, "config", "check", "--config", path)
	if code != 1 || !strings.Contains(stderr, "store.path: check store "+db+": the database is damaged") {
		t.Fatalf("damaged store: exit %d:\n%s", code, stderr)
	}
}

// An unset ${VAR} in store.url is one problem, said once: the store is not
// then opened with the unresolved text (which only added "not a valid
// PostgreSQL connection string").
func TestConfigCheckUnsetDatabaseURLIsOneProblem(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "opsbot.yaml")
	text := "store:\n  driver: postgres\n  url: \"${OPSBOT_TEST_NEVER_SET_DATABASE_URL}\"\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"config", "check", "--config", path}, {"run", "--config", path, "jobs"}} {
		code, _, errs := runArgs(t, args...)
		if code != 1 || strings.Count(errs, "\n  - ") != 1 || !strings.Contains(errs, "${OPSBOT_TEST_NEVER_SET_DATABASE_URL}, which is not set") {
			t.Errorf("%q: exit %d\n%s", args, code, errs)
		}
	}
}
