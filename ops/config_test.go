package ops_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops"
)

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	good := func() ops.Config {
		return ops.Config{KeyFile: filepath.Join(dir, "missing-key"), KnownHosts: kh,
			Hosts: map[string]ops.HostConfig{"gpu1": {Addr: "127.0.0.1:22", User: "root"}, "pve": {Addr: "127.0.0.1:23", User: "root"}},
			Services: map[string]ops.ServiceConfig{"qwen": {Host: "gpu1", Unit: "sglang-qwen.service", URL: "http://127.0.0.1:30000",
				ProxmoxNode: "pve", VMID: 129}}}
	}
	cases := []struct {
		name string
		edit func(*ops.Config)
		want string
	}{
		{"no known_hosts", func(c *ops.Config) { c.KnownHosts = "" }, "known_hosts"},
		{"unknown host", func(c *ops.Config) { s := c.Services["qwen"]; s.Host = "gpu9"; c.Services["qwen"] = s }, "gpu9"},
		{"unknown node", func(c *ops.Config) { s := c.Services["qwen"]; s.ProxmoxNode = "pve9"; c.Services["qwen"] = s }, "pve9"},
		{"bad url", func(c *ops.Config) { s := c.Services["qwen"]; s.URL = "gpu1:30000"; c.Services["qwen"] = s }, "url"},
		{"bad engine", func(c *ops.Config) { s := c.Services["qwen"]; s.Engine = "tgi"; c.Services["qwen"] = s }, "tgi"},
		{"prefix service host", func(c *ops.Config) {
			c.Hosts["gpu1"] = ops.HostConfig{Addr: "127.0.0.1:22", User: "root", Prefix: []string{"pct", "exec", "129", "--"}}
		}, "prefix"},
		{"unknown jump", func(c *ops.Config) { c.Hosts["gpu1"] = ops.HostConfig{Addr: "127.0.0.1:22", Jump: "bastion"} }, "bastion"},
		{"missing key", func(c *ops.Config) {}, "missing-key"},
	}
	for _, c := range cases {
		cfg := good()
		c.edit(&cfg)
		if _, err := ops.New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one naming %q", c.name, err, c.want)
		}
	}
}
