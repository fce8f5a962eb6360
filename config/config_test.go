package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

const minimal = `
store: {path: opsbot.db}
ssh: {key_file: id_ed25519, known_hosts: known_hosts}
hosts:
  gpu1: {addr: "127.0.0.1:2222", user: root}
  pve: {addr: "127.0.0.1:2223", user: root}
services:
  qwen: {host: gpu1, unit: sglang-qwen.service, url: "http://127.0.0.1:30000", proxmox: {node: pve, vmid: 129}}
auth:
  users: {"console:alice": admin}
`

func TestExampleConfigLoads(t *testing.T) {
	data, err := os.ReadFile("../deploy/opsbot.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "matrix-token"), []byte("syt_secret_matrix\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "file:/etc/opsbot/matrix-token", "file:matrix-token")
	c, err := Parse([]byte(text), dir, env(map[string]string{"SLACK_BOT_TOKEN": "xoxb-secret-bot", "SLACK_APP_TOKEN": "xapp-secret-app"}))
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if c.Slack.BotToken.Value() != "xoxb-secret-bot" || c.Matrix.AccessToken.Value() != "syt_secret_matrix" {
		t.Fatalf("secrets not resolved: %q %q", c.Slack.BotToken.Value(), c.Matrix.AccessToken.Value())
	}
	if s := c.Services["qwen"]; s.Proxmox == nil || s.Proxmox.VMID != 129 || s.DefaultSteps != 3 {
		t.Fatalf("service: %+v", s)
	}
	out, err := c.Redacted()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"xoxb-secret-bot", "xapp-secret-app", "syt_secret_matrix"} {
		if strings.Contains(string(out), secret) {
			t.Fatalf("redacted config prints a secret:\n%s", out)
		}
	}
}

func TestDefaultsAndRelativePaths(t *testing.T) {
	c, err := Parse([]byte(minimal), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxSteps != DefaultMaxSteps || c.Auth.DefaultRole != "none" || c.Services["qwen"].ClearMiB != DefaultClearMiB {
		t.Fatalf("defaults not applied: %+v %+v", c.Limits, c.Services["qwen"])
	}
	if c.SSH.KeyFile != "/etc/opsbot/id_ed25519" && !strings.HasSuffix(c.SSH.KeyFile, "id_ed25519") {
		t.Fatalf("key file %q", c.SSH.KeyFile)
	}
}

func TestDefaultService(t *testing.T) {
	two := strings.Replace(minimal, "auth:", "  coder: {host: gpu1, unit: sglang-coder.service, url: \"http://127.0.0.1:30001\"}\nauth:", 1)
	c, err := Parse([]byte(two+"default_service: qwen\n"), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.DefaultService != "qwen" {
		t.Fatalf("default_service %q, want qwen", c.DefaultService)
	}
	if c, err = Parse([]byte(two), "/etc/opsbot", env(nil)); err != nil || c.DefaultService != "" {
		t.Fatalf("unset default_service: %q %v (it is optional)", c.DefaultService, err)
	}
}

func TestInvalidConfigsSayWhatIsWrong(t *testing.T) {
	cases := []struct{ name, edit, want string }{
		{"unknown key", minimal + "bogus: 1\n", "bogus"},
		{"unknown host", strings.Replace(minimal, "{host: gpu1,", "{host: gpu9,", 1), "gpu9"},
		{"missing env", minimal + "slack: {enabled: true, bot_token: \"${NOPE_TOKEN}\", app_token: x}\n", "NOPE_TOKEN"},
		{"bad duration", minimal + "limits: {job_timeout: soon}\n", "duration"},
		{"bad role", strings.Replace(minimal, `admin}`, `wizard}`, 1), "wizard"},
		{"unknown default service", minimal + "default_service: qwne\n", "default_service names unknown service \"qwne\""},
		{"service host with a prefix", strings.Replace(minimal, `gpu1: {addr: "127.0.0.1:2222", user: root}`,
			`gpu1: {addr: "127.0.0.1:2222", user: root, prefix: [pct, exec, "129", "--"]}`, 1), "services.qwen.host gpu1 has a command prefix"},
		{"url without host", strings.Replace(minimal, `"http://127.0.0.1:30000"`, `"http://"`, 1), "services.qwen.url"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.edit), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.name, err, c.want)
		}
	}
}
