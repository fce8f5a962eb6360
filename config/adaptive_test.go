package config

import (
	"errors"
	"strings"
	"testing"
)

// withAdaptive is minimal with the qwen service's adaptive keys set to kv
// (YAML flow entries, such as `adaptive_config: /etc/passwd`).
func withAdaptive(kv string) string {
	return strings.Replace(minimal, `url: "http://127.0.0.1:30000"`, `url: "http://127.0.0.1:30000", `+kv, 1)
}

// onlyProblem parses text and returns its one problem ("" when it loads);
// more than one fails the test.
func onlyProblem(t *testing.T, text string) string {
	t.Helper()
	_, err := Parse([]byte(text), "/etc/opsbot", env(nil))
	if err == nil {
		return ""
	}
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 1 {
		t.Fatalf("want one problem, got %v", err)
	}
	return ce.Problems[0].Error()
}

// services.NAME.adaptive_config names a file a per-load change writes as
// root on the service's host: config check refuses any path outside
// /etc/sglang/ (or the service's adaptive_dir), a directory, the unit's own
// path, another path the config names, and says which rule and key.
func TestAdaptiveConfigRefusals(t *testing.T) {
	cases := []struct{ name, kv, want string }{
		{"passwd", `adaptive_config: /etc/passwd`,
			`services.qwen.adaptive_config "/etc/passwd" is outside the directories an adaptive config may be written to (/etc/sglang/): put it there, such as /etc/sglang/qwen-adaptive.json, or name its directory in services.qwen.adaptive_dir`},
		{"authorized keys", `adaptive_config: /root/.ssh/authorized_keys`, `services.qwen.adaptive_config "/root/.ssh/authorized_keys" is outside the directories`},
		{"a disk", `adaptive_config: /dev/sda`, `services.qwen.adaptive_config "/dev/sda" is outside the directories`},
		{"a kernel setting", `adaptive_config: /proc/sys/kernel/panic`, `services.qwen.adaptive_config "/proc/sys/kernel/panic" is outside the directories`},
		{"a directory", `adaptive_config: /etc/sglang/`, `services.qwen.adaptive_config "/etc/sglang/" names a directory: name the file in it, such as /etc/sglang/qwen-adaptive.json`},
		{"the root itself", `adaptive_config: /etc/sglang`, `services.qwen.adaptive_config "/etc/sglang" names a directory`},
		{"a dot", `adaptive_config: /etc/sglang/.`, `services.qwen.adaptive_config "/etc/sglang/." names a directory`},
		{"its adaptive_dir itself", `adaptive_dir: /srv/sglang, adaptive_config: /srv/sglang`, `services.qwen.adaptive_config "/srv/sglang" names a directory`},
		{"the unit's path", `adaptive_config: /etc/systemd/system/sglang-qwen.service`,
			`services.qwen.adaptive_config "/etc/systemd/system/sglang-qwen.service" is the path of a unit file (services.qwen.unit sglang-qwen.service): the adaptive config is a JSON file of its own, and writing it there would replace the unit`},
		{"the unit's name under the root", `adaptive_config: /etc/sglang/sglang-qwen.service`, `is the path of a unit file (services.qwen.unit sglang-qwen.service)`},
		{"a drop-in", `adaptive_config: /etc/systemd/system/sglang-qwen.service.d/a.json`, `is in a unit's drop-in directory (sglang-qwen.service.d)`},
		{"systemd's directory", `adaptive_config: /lib/systemd/system/x.json`, `is in /lib/systemd/, where systemd reads units`},
		{"dot-dot out of the root", `adaptive_config: /etc/sglang/../passwd`,
			`services.qwen.adaptive_config "/etc/sglang/../passwd" must be a plain file path: no '.' or '..' components, no repeated '/' (write "/etc/passwd")`},
		{"repeated slash", `adaptive_config: /etc/sglang//q.json`, `must be a plain file path`},
		{"not json", `adaptive_config: /etc/sglang/qwen`, `services.qwen.adaptive_config "/etc/sglang/qwen" must name a .json file (SGLang reads it as JSON)`},
		{"the store", `adaptive_config: /etc/sglang/opsbot.db`, `must name a .json file`},
		{"outside its adaptive_dir", `adaptive_dir: /srv/sglang, adaptive_config: /srv/other/q.json`,
			`services.qwen.adaptive_config "/srv/other/q.json" is outside the directories an adaptive config may be written to (/etc/sglang/ and /srv/sglang/)`},
		{"needs quotes", `adaptive_config: "/etc/sglang/a b.json"`, `services.qwen.adaptive_config must be an absolute path of letters, digits and /._-+@ only`},
		{"relative", `adaptive_config: a.json`, `services.qwen.adaptive_config must be an absolute path`},
		{"dir in /etc", `adaptive_dir: /etc/ssh`, `services.qwen.adaptive_dir "/etc/ssh" lies in /etc, a system directory`},
		{"dir in /dev", `adaptive_dir: /dev/shm`, `services.qwen.adaptive_dir "/dev/shm" lies in /dev, a system directory`},
		{"dir top level", `adaptive_dir: /root`, `services.qwen.adaptive_dir "/root" is a top-level directory`},
		{"dir the root", `adaptive_dir: /`, `services.qwen.adaptive_dir "/" is a top-level directory`},
		{"dir hidden", `adaptive_dir: /root/.ssh`, `services.qwen.adaptive_dir "/root/.ssh" has a hidden component (.ssh)`},
		{"dir dot-dot", `adaptive_dir: /srv/sglang/../../etc`, `services.qwen.adaptive_dir "/srv/sglang/../../etc" must be a plain directory path`},
		{"dir trailing slash", `adaptive_dir: /srv/sglang/`, `must be a plain directory path: no '.' or '..' components, no repeated or trailing '/' (write "/srv/sglang")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := onlyProblem(t, withAdaptive(c.kv)); !strings.Contains(got, c.want) {
				t.Errorf("%s:\n got %q\nwant %q", c.kv, got, c.want)
			}
		})
	}
}

// Paths the config names elsewhere are refused by the key that names them.
func TestAdaptiveConfigIsNoOtherPath(t *testing.T) {
	two := minimal + "  llama: {host: gpu1, unit: sglang-llama.service, url: \"http://127.0.0.1:30001\"}\n"
	two = strings.Replace(two, "auth:\n  users: {\"console:alice\": admin}\n", "", 1) + "auth:\n  users: {\"console:alice\": admin}\n"
	cases := []struct{ name, text, want string }{
		{"another service's default", strings.Replace(two, `unit: sglang-qwen.service, url: "http://127.0.0.1:30000"`,
			`unit: sglang-qwen.service, url: "http://127.0.0.1:30000", adaptive_config: /etc/sglang/llama-adaptive.json`, 1),
			`services.qwen.adaptive_config "/etc/sglang/llama-adaptive.json" is also services.llama's adaptive config (its default): each file has one use`},
		{"both set alike, said once", strings.Replace(strings.Replace(two, `url: "http://127.0.0.1:30000"`, `url: "http://127.0.0.1:30000", adaptive_config: /etc/sglang/shared.json`, 1),
			`url: "http://127.0.0.1:30001"`, `url: "http://127.0.0.1:30001", adaptive_config: /etc/sglang/shared.json`, 1),
			`services.qwen.adaptive_config "/etc/sglang/shared.json" is also services.llama.adaptive_config`},
		{"the store", strings.Replace(withAdaptive(`adaptive_config: /etc/sglang/state.json`), "store: {path: opsbot.db}", "store: {path: /etc/sglang/state.json}", 1),
			`services.qwen.adaptive_config "/etc/sglang/state.json" is also store.path`},
		{"the known hosts", strings.Replace(withAdaptive(`adaptive_config: /etc/sglang/k.json`), "known_hosts: known_hosts", "known_hosts: /etc/sglang/k.json", 1),
			`is also ssh.known_hosts`},
		{"the key", strings.Replace(withAdaptive(`adaptive_config: /etc/sglang/id.json`), "key_file: id_ed25519", "key_file: /etc/sglang/id.json", 1),
			`services.qwen.adaptive_config "/etc/sglang/id.json" is also ssh.key_file`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := onlyProblem(t, c.text); !strings.Contains(got, c.want) {
				t.Errorf("got %q\nwant %q", got, c.want)
			}
		})
	}
}

// The default, a file under /etc/sglang/ and one under the service's own
// adaptive_dir load.
func TestAdaptiveConfigAccepted(t *testing.T) {
	for _, kv := range []string{
		`adaptive_config: /etc/sglang/qwen-adaptive.json`,
		`adaptive_config: /etc/sglang/qwen/per-load.json`,
		`adaptive_dir: /srv/sglang, adaptive_config: /srv/sglang/qwen.json`,
		`adaptive_dir: /var/lib/sglang/adaptive, adaptive_config: /var/lib/sglang/adaptive/qwen.json`,
		`adaptive_dir: /etc/sglang/qwen, adaptive_config: /etc/sglang/qwen/a.json`,
		`adaptive_dir: /srv/sglang`,
	} {
		if got := onlyProblem(t, withAdaptive(kv)); got != "" {
			t.Errorf("%s: %s", kv, got)
		}
	}
	if got := onlyProblem(t, minimal); got != "" {
		t.Errorf("default: %s", got)
	}
}

// A confirmation names the files a per-load change writes from the config:
// CommandOptions carries each service's unit, engine and adaptive config
// (none for vLLM, which writes no file beside the unit).
func TestCommandOptionsNameTheFiles(t *testing.T) {
	text := withAdaptive(`adaptive_config: /etc/sglang/q.json`) + "  llama: {host: gpu1, unit: vllm-llama.service, url: \"http://127.0.0.1:30001\", engine: vllm}\n"
	text = strings.Replace(text, "auth:\n  users: {\"console:alice\": admin}\n", "", 1) + "auth:\n  users: {\"console:alice\": admin}\n"
	c, err := Parse([]byte(text), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := c.CommandOptions().Services
	if len(got) != 2 || got[0].Name != "llama" || got[0].Engine != "vllm" || got[0].Unit != "vllm-llama.service" || got[0].Adaptive != "" ||
		got[1].Name != "qwen" || got[1].Engine != "sglang" || got[1].Unit != "sglang-qwen.service" || got[1].Adaptive != "/etc/sglang/q.json" {
		t.Fatalf("services %+v", got)
	}
}
