package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// labBase is a config as the lab writes it: it supplies LabKeys.
const labBase = `store: {path: /var/lib/lab/opsbot.db}
ssh: {key_file: /var/lib/lab/id_ed25519, known_hosts: /var/lib/lab/known_hosts}
hosts:
  pve: {addr: "127.0.0.1:2201", user: root}
  gpu1: {addr: "127.0.0.1:2202", user: root}
services:
  qwen: {host: gpu1, unit: sglang-qwen.service, url: "http://127.0.0.1:30001", engine: sglang, proxmox: {node: pve, vmid: 129}, gpus: [0,1,2,3]}
  coder: {host: gpu1, unit: sglang-coder.service, url: "http://127.0.0.1:30002", engine: sglang, proxmox: {node: pve, vmid: 130}, gpus: [4,5,6,7]}
default_service: qwen
auth: {default_role: admin}
`

func writeOver(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "opsbot.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// With --lab, a config may give the lab's services their watchdog options
// (services.qwen.auto_recover) and nothing else: the lab's settings of the
// service stay, the other service is untouched; any other key of a
// service, or a service the lab lacks, is a problem naming it, and nothing
// loads. CheckNotSet, the check before the lab starts, agrees.
func TestLabConfigMaySetWatchdogOptionsOnly(t *testing.T) {
	ok := writeOver(t, "watchdog: {interval: 30s, to: \"console:ops\"}\nservices:\n  qwen: {auto_recover: true}\n")
	if err := CheckNotSet(ok, LabKeys); err != nil {
		t.Fatalf("CheckNotSet: %v", err)
	}
	c, err := LoadOver(ok, []byte(labBase), LabKeys)
	if err != nil {
		t.Fatal(err)
	}
	q, coder := c.Services["qwen"], c.Services["coder"]
	if !q.AutoRecover || q.URL != "http://127.0.0.1:30001" || q.Unit != "sglang-qwen.service" || q.Proxmox == nil || q.Proxmox.VMID != 129 || len(q.GPUs) != 4 {
		t.Fatalf("qwen over the lab: %+v", q)
	}
	if coder.AutoRecover || coder.URL != "http://127.0.0.1:30002" {
		t.Fatalf("coder over the lab: %+v", coder)
	}
	if c.Watchdog.To != "console:ops" {
		t.Fatalf("watchdog: %+v", c.Watchdog)
	}

	for _, tc := range []struct{ name, yaml, want string }{
		{"another key of a lab service", "services:\n  qwen: {auto_recover: true, url: \"http://10.0.0.1:30000\"}\n",
			"services.qwen.url: set in "},
		{"a service the lab lacks", "services:\n  nope: {auto_recover: true}\n", "services.nope: set in "},
		{"a service that is no mapping", "services:\n  qwen: true\n", "services.qwen: set in "},
		{"the lab's hosts", "hosts: {gpu9: {addr: \"10.0.0.9:22\", user: root}}\n", "hosts: set in "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeOver(t, tc.yaml)
			c, err := LoadOver(p, []byte(labBase), LabKeys)
			var ce *Error
			if c != nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("LoadOver: %v, want a problem %q naming %s", err, tc.want, p)
			}
			if tc.name != "a service the lab lacks" { // only LoadOver knows the lab's services
				if err := CheckNotSet(p, LabKeys); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("CheckNotSet: %v, want %q", err, tc.want)
				}
			}
		})
	}
}
