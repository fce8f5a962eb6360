package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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
	// Enabled, the adapters' secrets are resolved (disabled, they need none:
	// TestDisabledAdaptersNeedNoSecrets).
	text = strings.ReplaceAll(text, "enabled: false", "enabled: true")
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
	if c.Sweep.Metric != "output_tok_s" || c.Alerts.RegressionPct != 10 || c.Alerts.RegressionRuns != 7 {
		t.Fatalf("sweep and alert defaults: %+v %+v", c.Sweep, c.Alerts)
	}
	c, err = Parse([]byte(minimal+"sweep: {metric: accept_len}\nalerts: {regression_pct: 5, regression_runs: 3}\n"), "/etc/opsbot", env(nil))
	if err != nil || c.Sweep.Metric != "accept_len" || c.Alerts.RegressionPct != 5 || c.Alerts.RegressionRuns != 3 {
		t.Fatalf("sweep and alerts as set: %+v %+v %v", c.Sweep, c.Alerts, err)
	}
}

// TestTrustedProxies: http.trusted_proxies are CIDRs, IPv4 and IPv6; none
// by default.
func TestTrustedProxies(t *testing.T) {
	c, err := Parse([]byte(minimal), "/etc/opsbot", env(nil))
	if err != nil || len(c.HTTP.TrustedPrefixes()) != 0 {
		t.Fatalf("default: %v %v, want none", c.HTTP.TrustedPrefixes(), err)
	}
	c, err = Parse([]byte(minimal+"http: {listen: \"127.0.0.1:9090\", trusted_proxies: [127.0.0.1/32, 10.1.2.3/8, \"fd00::/8\"]}\n"), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.HTTP.TrustedPrefixes()); got != "[127.0.0.1/32 10.0.0.0/8 fd00::/8]" {
		t.Errorf("trusted proxies %s", got)
	}
}

func TestAdaptiveConfigPath(t *testing.T) {
	if got := (Service{}).AdaptiveConfigPath("qwen"); got != "/etc/sglang/qwen-adaptive.json" {
		t.Errorf("default %q", got)
	}
	if got := (Service{AdaptiveConfig: "/srv/q.json"}).AdaptiveConfigPath("qwen"); got != "/srv/q.json" {
		t.Errorf("set %q", got)
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
		{"stranded window too short", minimal + "limits: {stranded_after: 500ms}\n", "limits.stranded_after must be within 2s..10m, got 500ms"},
		{"bad role", strings.Replace(minimal, `admin}`, `wizard}`, 1), "wizard"},
		{"unknown default service", minimal + "default_service: qwne\n", "default_service names unknown service \"qwne\""},
		{"service host with a prefix", strings.Replace(minimal, `gpu1: {addr: "127.0.0.1:2222", user: root}`,
			`gpu1: {addr: "127.0.0.1:2222", user: root, prefix: [pct, exec, "129", "--"]}`, 1), "services.qwen.host gpu1 has a command prefix"},
		{"unknown sweep metric", minimal + "sweep: {metric: tok_s}\n", `sweep.metric: "tok_s" is not one of output_tok_s, per_stream_tok_s, accept_len`},
		{"regression pct out of range", minimal + "alerts: {regression_pct: 150}\n", "alerts.regression_pct: 150"},
		{"regression runs negative", minimal + "alerts: {regression_runs: -1}\n", "alerts.regression_runs: -1"},
		{"url without host", strings.Replace(minimal, `"http://127.0.0.1:30000"`, `"http://"`, 1), "services.qwen.url"},
		{"adaptive config path needing quotes", strings.Replace(minimal, `url: "http://127.0.0.1:30000"`, `url: "http://127.0.0.1:30000", adaptive_config: "/etc/sglang/a b.json"`, 1),
			`services.qwen.adaptive_config must be an absolute path of letters, digits and /._-+@ only`},
		{"adaptive config path relative", strings.Replace(minimal, `url: "http://127.0.0.1:30000"`, `url: "http://127.0.0.1:30000", adaptive_config: "a.json"`, 1),
			`services.qwen.adaptive_config must be an absolute path`},
		{"trusted proxy not a CIDR", minimal + "http: {trusted_proxies: [10.0.0.0/8, 198.51.100.9]}\n",
			`http.trusted_proxies[1]: "198.51.100.9" is not a CIDR: write a network like 10.0.0.0/8, or one proxy as 198.51.100.9/32`},
		{"trusted proxy a name", minimal + "http: {trusted_proxies: [proxy.internal]}\n",
			`http.trusted_proxies[0]: "proxy.internal" is not a CIDR: write a network like 10.0.0.0/8, or one proxy as 192.0.2.7/32`},
		{"trusted proxy with a bad mask", minimal + "http: {trusted_proxies: [10.0.0.0/33]}\n", `http.trusted_proxies[0]: "10.0.0.0/33" is not a CIDR`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.edit), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

// TestServiceURLPortRange: a service url's port must be 1 to 65535; 0 and 99999 are refused by
// the key, with the range and the url given; the edges are accepted.
func TestServiceURLPortRange(t *testing.T) {
	for _, c := range []struct{ port, want string }{
		{"0", `services.qwen.url must have a port from 1 to 65535, got "http://127.0.0.1:0"`},
		{"99999", `services.qwen.url must have a port from 1 to 65535, got "http://127.0.0.1:99999"`},
		{"65536", `services.qwen.url must have a port from 1 to 65535, got "http://127.0.0.1:65536"`},
		{"1", ""},
		{"65535", ""},
	} {
		text := strings.Replace(minimal, "http://127.0.0.1:30000", "http://127.0.0.1:"+c.port, 1)
		_, err := Parse([]byte(text), "/etc/opsbot", env(nil))
		var ce *Error
		if c.want == "" && err != nil || c.want != "" && (!errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Error() != c.want) {
			t.Errorf("port %s: %v, want %q", c.port, err, c.want)
		}
	}
}

func TestDisabledAdaptersNeedNoSecrets(t *testing.T) {
	text := minimal + `
slack: {enabled: false, bot_token: "${UNSET_SLACK_TOKEN}", app_token: "file:/nonexistent/app-token"}
matrix: {enabled: false, access_token: "file:/nonexistent/matrix-token"}
`
	if _, err := Parse([]byte(text), "/etc/opsbot", env(nil)); err != nil {
		t.Fatalf("disabled adapters: %v", err)
	}
	on := strings.ReplaceAll(text, "enabled: false", "enabled: true")
	_, err := Parse([]byte(on), "/etc/opsbot", env(nil))
	for _, want := range []string{"slack.bot_token refers to ${UNSET_SLACK_TOKEN}", "slack.app_token: read secret file", "matrix.access_token: read secret file",
		"matrix.homeserver is required", "matrix.rooms"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("enabled adapters: err %v, want it to say %q", err, want)
		}
	}
}

// A token-like value where another type belongs is reported by its key
// and the type expected, never by the value (not even its first characters).
func TestTypeErrorsNeverShowSecrets(t *testing.T) {
	const tok = "xoxb-1234567890-SECRETVALUE"
	cases := []struct{ name, yaml, key string }{
		{"token as the slack section", "slack: " + tok + "\n", "slack: expected a mapping, got a string"},
		{"token as a list", "slack: {enabled: true, bot_token: [" + tok + "]}\n", "slack.bot_token: expected a string, got a list"},
		{"token as a mapping", "slack:\n  bot_token:\n    value: " + tok + "\n", "slack.bot_token: expected a string, got a mapping"},
		{"token in a boolean", "slack: {enabled: " + tok + "}\n", "slack.enabled: expected true or false"},
		{"password as a mapping", "matrix: {password: {p: " + tok + "}}\n", "matrix.password: expected a string, got a mapping"},
		{"access token as a number", "matrix: {access_token: [12345678901234567890]}\n", "matrix.access_token: expected a string, got a list"},
		{"token as the matrix section", "matrix: [" + tok + "]\n", "matrix: expected a mapping, got a list"},
		{"token as a key", "slack: {" + tok + ": 1}\n", "unknown key"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(minimal+c.yaml), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: err %v, want it to say %q", c.name, err, c.key)
			continue
		}
		for _, leak := range []string{"xoxb", "SECRET", "1234567"} {
			if strings.Contains(err.Error(), leak) && c.name != "token as a key" {
				t.Errorf("%s: error shows the secret (%q): %v", c.name, leak, err)
			}
		}
	}
}

// Every problem is listed at once, one per line, each naming its key path.
func TestEveryProblemListedByKey(t *testing.T) {
	text := `
store: {path: opsbot.db}
ssh: {key_file: id_ed25519, known_hosts: known_hosts, connect_timeout: soon}
hosts:
  gpu1: {addr: "127.0.0.1:2222", user: [root]}
services:
  qwen: {host: gpu9, unit: sglang-qwen.service, url: "gpu1:30000", gpus: [0, one]}
limits: {max_steps: ten}
bogus: 1
auth:
  users: {"console:alice": wizard}
`
	_, err := Parse([]byte(text), "/etc/opsbot", env(nil))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("err %v, want a *Error", err)
	}
	want := []string{
		`ssh.connect_timeout: expected a duration like 30s or 5m, got "soon"`,
		"hosts.gpu1.user: expected a string, got a list",
		`services.qwen.gpus[1]: expected a whole number, got "one"`,
		`limits.max_steps: expected a whole number, got "ten"`,
		"bogus: unknown key",
		`services.qwen.host names unknown host "gpu9"`,
		"services.qwen.url must be",
		`auth.users["console:alice"]: unknown role "wizard"`,
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
	if len(ce.Problems) < len(want) {
		t.Errorf("%d problems, want at least %d", len(ce.Problems), len(want))
	}
	for _, p := range ce.Problems {
		if strings.Contains(p.Error(), "config.") || strings.Contains(p.Error(), "!!") {
			t.Errorf("problem speaks Go or YAML types: %v", p)
		}
	}
}

func TestWorldWritableConfigRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "opsbot.yaml")
	if err := os.WriteFile(path, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o600, 0o644, 0o664} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err != nil {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o666, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "chmod o-w "+path) || !strings.Contains(err.Error(), fmt.Sprintf("mode %04o", uint32(mode))) {
			t.Errorf("mode %04o: err %v, want a refusal naming the file, its mode and chmod o-w", mode, err)
		}
	}
}

// TestSlackSection: the slack section's keys as issue 15 names them, each
// problem named by its key, no secret ever quoted.
func TestSlackSection(t *testing.T) {
	const bot, app, signing = "xoxb-1-SECRETBOT", "xapp-1-SECRETAPP", "SECRETSIGNING"
	good := minimal + `slack:
  enabled: true
  mode: http
  bot_token: ` + bot + `
  signing_secret: ` + signing + `
  api_url: http://127.0.0.1:8080/
  channel: C0OPS
  channels: [C0OPS, G0PRIV]
  allow_dms: true
`
	c, err := Parse([]byte(strings.Replace(good, `"console:alice": admin`, `"console:alice": admin, "slack-group:S0123": operator`, 1)), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Slack
	if s.Mode != SlackModeHTTP || s.BotToken.Value() != bot || s.SigningSecret.Value() != signing || s.APIURL != "http://127.0.0.1:8080/" ||
		s.Channel != "C0OPS" || len(s.Channels) != 2 || !s.AllowDMs || !reflect.DeepEqual(c.Auth.Users["slack-group:S0123"], RoleEverywhere("operator")) {
		t.Fatalf("slack section: %+v", s)
	}
	out, err := c.Redacted()
	if err != nil || strings.Contains(string(out), bot) || strings.Contains(string(out), signing) || !strings.Contains(string(out), "mode: http") {
		t.Fatalf("redacted: %v\n%s", err, out)
	}
	c, err = Parse([]byte(minimal+"slack: {enabled: true, bot_token: "+bot+", app_token: "+app+", channels: [C0OPS]}\n"), "/etc/opsbot", env(nil))
	if err != nil || c.Slack.Mode != SlackModeSocket {
		t.Fatalf("mode unset: %v, %+v; want socket", err, c.Slack)
	}

	bad := []struct{ name, from, to, want string }{
		{"mode", "mode: http", "mode: webhook", "slack.mode must be http or socket"},
		{"http without its secret", "  signing_secret: " + signing + "\n", "", "slack.signing_secret is required in http mode"},
		{"socket without its token", "mode: http", "mode: socket", "slack.app_token is required in socket mode"},
		{"user token as the bot's", "bot_token: " + bot, "bot_token: xoxp-1-SECRETUSER", "slack.bot_token must be a bot token (xoxb-...)"},
		{"api_url", "api_url: http://127.0.0.1:8080/", "api_url: 127.0.0.1:8080", "slack.api_url must be an http(s) URL ending in /"},
		{"channel by name", "channel: C0OPS", `channel: "#ops"`, "slack.channel must be a channel id"},
		{"channels by name", "[C0OPS, G0PRIV]", "[C0OPS, ops]", "slack.channels[1] must be a channel id"},
		{"no channels", "  channels: [C0OPS, G0PRIV]\n  allow_dms: true\n", "", "slack.channels must list the channel ids"},
		{"listen is serve's", "  channel: C0OPS\n", "  channel: C0OPS\n  listen: 127.0.0.1:8080\n", "unknown key"},
	}
	for _, b := range bad {
		text := strings.Replace(good, b.from, b.to, 1)
		if text == good {
			t.Fatalf("%s: edit did not apply", b.name)
		}
		_, err := Parse([]byte(text), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v; want %q", b.name, err, b.want)
			continue
		}
		for _, secret := range []string{bot, signing, "SECRETUSER"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error shows a secret: %v", b.name, err)
			}
		}
	}
}

// TestMatrixSection: the matrix keys of the contract decode, stale_after
// defaults to 5m, and what the adapter cannot serve is refused by key:
// aliases or names instead of room ids, a bad user id or URL, and
// encryption (not in this build).
func TestMatrixSection(t *testing.T) {
	text := minimal + `
matrix:
  enabled: true
  homeserver: http://127.0.0.1:8008
  user_id: "@opsbot:example.org"
  password: ${MATRIX_PASSWORD}
  rooms: ["!abc:example.org"]
`
	c, err := Parse([]byte(text), "/etc/opsbot", env(map[string]string{"MATRIX_PASSWORD": "pw"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Matrix.StaleAfter.D() != DefaultMatrixStaleAfter || c.Matrix.Password.Value() != "pw" {
		t.Fatalf("matrix: %+v", c.Matrix)
	}
	bad := strings.NewReplacer(`"!abc:example.org"`, `"#oncall:example.org", "oncall"`, `"@opsbot:example.org"`, `"opsbot"`,
		"http://127.0.0.1:8008", "127.0.0.1:8008").Replace(text) +
		"  stale_after: 10m\n  encryption: true\n"
	_, err = Parse([]byte(bad), "/etc/opsbot", env(map[string]string{"MATRIX_PASSWORD": "pw"}))
	for _, want := range []string{"matrix.rooms[0]: want a room id", "matrix.rooms[1]: want a room id", "matrix.user_id: want a Matrix user id",
		"matrix.homeserver: want the homeserver's base URL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want it to say %q", err, want)
		}
	}
	// encryption: true is refused only by a build without it (no -tags goolm).
	const noE2EE = "matrix.encryption: end-to-end encryption is not in this build"
	if said := err != nil && strings.Contains(err.Error(), noE2EE); said == MatrixEncryptionBuilt {
		t.Errorf("built with encryption %v, err %v: want %q said only without it", MatrixEncryptionBuilt, err, noE2EE)
	}
}

// TestMatrixPowerLevels: matrix.power_levels takes any subset of the roles
// with integer levels, a higher role at a level at least as high; anything
// else is refused by key, every problem at once, and the config is not
// taken.
func TestMatrixPowerLevels(t *testing.T) {
	base := minimal + `
matrix:
  enabled: true
  homeserver: http://127.0.0.1:8008
  user_id: "@opsbot:example.org"
  password: pw
  rooms: ["!abc:example.org"]
`
	good := []struct {
		yaml string
		want map[string]int
	}{
		{"{operator: 50, admin: 100}", map[string]int{"operator": 50, "admin": 100}},
		{"{operator: 50}", map[string]int{"operator": 50}},
		{"{viewer: 0, operator: 50, admin: 100}", map[string]int{"viewer": 0, "operator": 50, "admin": 100}},
		{"{operator: 100, admin: 100}", map[string]int{"operator": 100, "admin": 100}},
		{"{viewer: -10}", map[string]int{"viewer": -10}},
		{"{}", map[string]int{}},
	}
	for _, g := range good {
		c, err := Parse([]byte(base+"  power_levels: "+g.yaml+"\n"), "/etc/opsbot", env(nil))
		if err != nil {
			t.Errorf("power_levels: %s: %v", g.yaml, err)
			continue
		}
		if len(c.Matrix.PowerLevels) != len(g.want) {
			t.Errorf("power_levels: %s: got %v", g.yaml, c.Matrix.PowerLevels)
		}
		for k, v := range g.want {
			if c.Matrix.PowerLevels[k] != v {
				t.Errorf("power_levels: %s: got %v", g.yaml, c.Matrix.PowerLevels)
			}
		}
	}
	bad := []struct{ yaml, want string }{
		{"{operator: 50, admin: 40}", "matrix.power_levels: admin needs a level at least as high as operator's, got admin: 40 below operator: 50"},
		{"{viewer: 60, operator: 50}", "operator needs a level at least as high as viewer's"},
		{"{viewer: 60, admin: 50}", "admin needs a level at least as high as viewer's"},
		{"{moderator: 50}", "matrix.power_levels.moderator: unknown role"},
		{"{Operator: 50}", "matrix.power_levels.Operator: unknown role"},
		{"{none: 0}", "matrix.power_levels.none: none is not a role to grant"},
		{"{admin: 9007199254740992}", "matrix.power_levels.admin: 9007199254740992 is not a Matrix power level"},
		{"{operator: fifty}", "matrix.power_levels.operator: expected a whole number"},
		{"{operator: 50.5}", "matrix.power_levels.operator: expected a whole number"},
		{"[50, 100]", "matrix.power_levels"},
	}
	for _, b := range bad {
		_, err := Parse([]byte(base+"  power_levels: "+b.yaml+"\n"), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("power_levels: %s: %v; want %q", b.yaml, err, b.want)
		}
	}
	// Every problem at once.
	_, err := Parse([]byte(base+"  power_levels: {moderator: 1, operator: 50, admin: 10}\n"), "/etc/opsbot", env(nil))
	for _, want := range []string{"matrix.power_levels.moderator", "admin needs a level at least as high as operator's"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want it to say %q", err, want)
		}
	}
}

// TestMatrixRecoveryKey: matrix.recovery_key is a secret (${ENV} or file:),
// never printed by Redacted, and only with matrix.encryption.
func TestMatrixRecoveryKey(t *testing.T) {
	dir := t.TempDir()
	const rk = "EsTc 1234 abcd efgh ijkl mnop qrst uvwx yzAB CDEF GHJK LMNP"
	if err := os.WriteFile(filepath.Join(dir, "recovery"), []byte(rk+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	section := func(ref, enc string) string {
		return minimal + `
matrix:
  enabled: true
  homeserver: http://127.0.0.1:8008
  user_id: "@opsbot:example.org"
  password: pw
  rooms: ["!abc:example.org"]
  recovery_key: ` + ref + `
  encryption: ` + enc + "\n"
	}
	for _, ref := range []string{"${MATRIX_RECOVERY_KEY}", "file:recovery"} {
		c, err := Parse([]byte(section(ref, "true")), dir, env(map[string]string{"MATRIX_RECOVERY_KEY": rk}))
		if err != nil {
			if !MatrixEncryptionBuilt && strings.Contains(err.Error(), "matrix.encryption") {
				continue
			}
			t.Fatalf("%s: %v", ref, err)
		}
		if c.Matrix.RecoveryKey.Value() != rk {
			t.Errorf("%s resolved to %q", ref, c.Matrix.RecoveryKey.Value())
		}
		out, err := c.Redacted()
		if err != nil || strings.Contains(string(out), "EsTc") || !strings.Contains(string(out), "recovery_key: '[redacted]'") {
			t.Errorf("redacted config (%v):\n%s", err, out)
		}
	}
	_, err := Parse([]byte(section("${MATRIX_RECOVERY_KEY}", "false")), dir, env(map[string]string{"MATRIX_RECOVERY_KEY": rk}))
	if err == nil || !strings.Contains(err.Error(), "matrix.recovery_key is for end-to-end encryption") {
		t.Errorf("recovery_key without encryption: %v", err)
	}
	_, err = Parse([]byte(section("${MATRIX_RECOVERY_KEY}", "true")), dir, env(nil))
	if err == nil || !strings.Contains(err.Error(), "matrix.recovery_key refers to ${MATRIX_RECOVERY_KEY}") {
		t.Errorf("an unset ${MATRIX_RECOVERY_KEY}: %v", err)
	}
}

// An unknown key near a known one names it: the typo people make most.
func TestUnknownKeyDidYouMean(t *testing.T) {
	text := "limits: {max_step: 3}\nservics: {}\nstore: {path: x.db, retension: 1h}\nbogus: 1\n"
	_, err := Parse([]byte(text), "/etc/opsbot", env(nil))
	for _, w := range []string{
		"limits.max_step: unknown key (line 1); did you mean limits.max_steps?",
		"servics: unknown key (line 2); did you mean services?",
		"store.retension: unknown key (line 3); did you mean store.retention?",
		"bogus: unknown key (line 4)\n",
	} {
		if err == nil || !strings.Contains(err.Error()+"\n", w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
}
