package main

import (
	"strings"
	"testing"
)

// `opsbot config check` refuses an adaptive_config that would let a
// per-load change overwrite a file of the system, a disk, a kernel setting,
// a directory or the unit itself, one line naming the key and the rule.
func TestConfigCheckRefusesAdaptiveConfigPaths(t *testing.T) {
	t.Parallel()
	const example = "adaptive_config: /etc/sglang/qwen-adaptive.json"
	cases := []struct{ path, want string }{
		{"/etc/passwd", `services.qwen.adaptive_config "/etc/passwd" is outside the directories an adaptive config may be written to (/etc/sglang/)`},
		{"/root/.ssh/authorized_keys", `services.qwen.adaptive_config "/root/.ssh/authorized_keys" is outside the directories`},
		{"/dev/sda", `services.qwen.adaptive_config "/dev/sda" is outside the directories`},
		{"/proc/sys/kernel/panic", `services.qwen.adaptive_config "/proc/sys/kernel/panic" is outside the directories`},
		{"/etc/sglang/", `services.qwen.adaptive_config "/etc/sglang/" names a directory: name the file in it`},
		{"/etc/systemd/system/sglang-qwen.service", `services.qwen.adaptive_config "/etc/systemd/system/sglang-qwen.service" is the path of a unit file (services.qwen.unit sglang-qwen.service)`},
	}
	for _, c := range cases {
		dir := t.TempDir()
		writeSSHFiles(t, dir, 0o600)
		cfg := exampleIn(t, dir, func(s string) string {
			if !strings.Contains(s, example) {
				t.Fatalf("the example names no %q", example)
			}
			return strings.Replace(s, example, "adaptive_config: "+c.path, 1)
		})
		code, stdout, stderr := configCheck(t, "config", "check", "--config", cfg)
		if ps := problems(stderr); code != 1 || stdout != "" || len(ps) != 1 || !strings.Contains(ps[0], c.want) {
			t.Errorf("%s: exit %d, problems %q; want 1 and one problem saying %q", c.path, code, ps, c.want)
		}
	}
}
