package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/store"
)

// repoRoot is the module's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// `config check` passes on deploy/opsbot.example.yaml once its key and
// known_hosts paths point at real files (the test rewrites only those).
func TestExampleConfigChecks(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "opsbot.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key, kh := writeSSHFiles(t, dir, 0o600)
	text := string(b)
	for old, new := range map[string]string{"/etc/opsbot/id_ed25519": key, "/etc/opsbot/known_hosts": kh} {
		if !strings.Contains(text, old) {
			t.Fatalf("the example names no %s", old)
		}
		text = strings.ReplaceAll(text, old, new)
	}
	cfg := writeFile(t, filepath.Join(dir, "opsbot.yaml"), text)
	code, out, errOut := configCheck(t, "config", "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("config check on the example: exit %d\n%s", code, errOut)
	}
	// Every key this issue adds is in the example, and so in the check's output.
	for _, want := range []string{"listen: 127.0.0.1:9090", "retention: 90d", "shutdown_grace: 1m", "format: text", "level: info"} {
		if !strings.Contains(out, want) {
			t.Errorf("effective config lacks %q:\n%s", want, out)
		}
	}
}

// A broken config fails `config check` with a line naming each bad key.
func TestBrokenConfigsNameTheKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "http: {listen: \"127.0.0.1:9090\", port: 9090}\n", "http.port: unknown key"},
		{"bad duration", "limits: {shutdown_grace: 10 parsecs}\n", "limits.shutdown_grace: expected a duration"},
		{"retention too short", "store: {path: opsbot.db, retention: 5m}\n", "store.retention must be at least 1h"},
		{"listen not host:port", "http: {listen: localhost}\n", "http.listen must be HOST:PORT"},
		{"listen bad port", "http: {listen: \"127.0.0.1:http\"}\n", "http.listen must be HOST:PORT"},
		{"trusted proxy not a CIDR", "http: {listen: \"127.0.0.1:9090\", trusted_proxies: [192.0.2.7]}\n", `http.trusted_proxies[0]: "192.0.2.7" is not a CIDR`},
		{"log format", "log: {format: xml}\n", "log.format must be text or json"},
		{"log level", "log: {level: loud}\n", "log.level: must be debug, info, warn or error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.yaml
			if !strings.HasPrefix(text, "store:") {
				text = "store: {path: opsbot.db}\n" + text
			}
			cfg := writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"), text)
			code, _, errOut := configCheck(t, "config", "check", "--config", cfg)
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, errOut)
			}
			found := false
			for _, p := range problems(errOut) {
				found = found || strings.Contains(p, tc.want)
			}
			if !found {
				t.Fatalf("no problem names %q:\n%s", tc.want, errOut)
			}
		})
	}
}

// With --lab, the config must not set what the lab supplies: the error
// names the key, and nothing starts.
func TestServeLabRefusesLabKeys(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"), "store: {path: opsbot.db}\ndefault_service: qwen\n")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", cfg, "--lab", "help"}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "default_service: set in") || !strings.Contains(errb.String(), "--lab supplies it") {
		t.Fatalf("exit %d:\n%s", code, errb.String())
	}
}

// deploy/opsbot.service passes `systemd-analyze verify` (with ExecStart
// pointing at a binary that exists here) and sets the hardening the issue
// asks for.
func TestUnitFileVerifies(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "opsbot.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"User=opsbot", "StateDirectory=opsbot", "ProtectSystem=strict", "ProtectHome=yes",
		"NoNewPrivileges=yes", "PrivateTmp=yes", "CapabilityBoundingSet=\n", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
		"Restart=on-failure", "ExecReload=/bin/kill -HUP $MAINPID"} {
		if !strings.Contains(unit, want) {
			t.Errorf("opsbot.service lacks %q", strings.TrimSpace(want))
		}
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)$`).FindStringSubmatch(unit)
	if m == nil {
		t.Fatal("opsbot.service sets no TimeoutStopSec in seconds")
	}
	if d, _ := time.ParseDuration(m[1] + "s"); d <= 60*time.Second {
		t.Errorf("TimeoutStopSec=%s is not longer than the default shutdown grace (60s)", m[1])
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, filepath.Join(dir, "opsbot.service"), strings.ReplaceAll(unit, "/usr/local/bin/opsbot", self))
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(analyze, "security", "--offline=true", path).CombinedOutput()
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Overall exposure level") {
				t.Log(strings.TrimSpace(sc.Text()))
			}
		}
	}
}

// No container engine runs here: the test builds the binary as the
// Dockerfile's build stage does (its go build line, run from the module
// root) and checks it is static and reports the version set by -ldflags;
// and it checks the Dockerfile's contract lines.
func TestDockerfileBuild(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	if testing.Short() {
		t.Skip("builds opsbot")
	}
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		`ENTRYPOINT ["opsbot"]`, `CMD ["serve", "--config", "/etc/opsbot/opsbot.yaml"]`, `VOLUME ["/var/lib/opsbot"]`,
		"USER 65532:65532", "HEALTHCHECK", "/healthz", "ca-certificates.crt", "CGO_ENABLED=0 go build",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	// The build stage's command, with its continuation lines joined.
	m := regexp.MustCompile(`(?s)RUN (CGO_ENABLED=0 go build .*?\./cmd/opsbot)`).FindStringSubmatch(df)
	if m == nil {
		t.Fatal("no CGO_ENABLED=0 go build ... ./cmd/opsbot line in the Dockerfile")
	}
	line := strings.NewReplacer("\\\n", " ", "\t", " ", "${VERSION}", "v9.9.9-test", "${REVISION}", "feedface", "/out/opsbot",
		filepath.Join(t.TempDir(), "opsbot")).Replace(m[1])
	bin := strings.Fields(line)[len(strings.Fields(line))-2]
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked (it has an ELF interpreter)")
		}
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "opsbot v9.9.9-test") || !strings.Contains(string(out), "revision feedface") ||
		!strings.Contains(string(out), "matrix end-to-end encryption: built in") {
		t.Fatalf("opsbot version: %v\n%s", err, out)
	}
	t.Logf("built as the Dockerfile does: %s", strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; "))
}

// deploy/opsbot.example.yaml documents every key of the config (set, or
// shown in a comment as `key:`).
func TestExampleConfigDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "opsbot.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	seen := map[reflect.Type]bool{}
	var walk func(tp reflect.Type, path string)
	walk = func(tp reflect.Type, path string) {
		for tp.Kind() == reflect.Pointer || tp.Kind() == reflect.Map || tp.Kind() == reflect.Slice {
			tp = tp.Elem()
		}
		if tp.Kind() != reflect.Struct || seen[tp] {
			return
		}
		seen[tp] = true
		for i := range tp.NumField() {
			f := tp.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !regexp.MustCompile(`(?m)(^|[\s{,#])` + regexp.QuoteMeta(name) + `:`).MatchString(text) {
				t.Errorf("deploy/opsbot.example.yaml does not document %s", strings.TrimPrefix(path+"."+name, "."))
			}
			walk(f.Type, path+"."+name)
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
}

// `opsbot run --config FILE --lab`: the lab supplies the hosts and
// services, the file the rest (here its own store, which the job lands in).
func TestRunConfigOverLab(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, filepath.Join(dir, "opsbot.yaml"), "store: {path: mine.db}\nauth: {default_role: viewer}\n")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"run", "--config", cfg, "--lab", "--json", "gpu status"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	st, err := store.Open(context.Background(), filepath.Join(dir, "mine.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if j, err := st.Job(context.Background(), 1); err != nil || j.Status != store.Succeeded || j.Command != "gpu status" {
		t.Fatalf("job #1 in the file's store: %+v, %v", j, err)
	}
}

// The files that decide trust have one recipe: README, the unit's header,
// the Dockerfile (group 65532) and the example config say the same modes and
// owners, and none says another mode for the key.
func TestOneRecipeForTrustFiles(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for name, wants := range map[string][]string{
		"README.md":                  {"0750 | root:opsbot", "`id_ed25519` | 0640 | root:opsbot", "`known_hosts` | 0644 | root:root", "`env` | 0600 | root:root", "chown root:opsbot /etc/opsbot/id_ed25519 && chmod 0640"},
		"deploy/opsbot.service":      {"install -d -m 0750 -o root -g opsbot /etc/opsbot", "id_ed25519: 0640 root:opsbot", "known_hosts: 0644 root:root", "0600 root:root"},
		"Dockerfile":                 {"/etc/opsbot 0750", "id_ed25519 0640\n# root:65532", "known_hosts 0644 root:root", "env 0600 root:root"},
		"deploy/opsbot.example.yaml": {"/etc/opsbot/env (0600 root:root", "This file and the key: 0640 root:opsbot", "known_hosts: 0644 root:root", "/etc/opsbot: 0750 root:opsbot"},
	} {
		text := read(name)
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not say %q", name, w)
			}
		}
		for _, other := range []string{"install -d -m 700 /etc/opsbot", "id_ed25519 (0600", "key (0600)"} {
			if strings.Contains(text, other) {
				t.Errorf("%s still says %q: one recipe", name, other)
			}
		}
	}
}
