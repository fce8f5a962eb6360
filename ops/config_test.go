package ops_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/ops"
)

// TestNewRefusesBadConfig: New checks only what it needs to build the service
// -> host -> node mapping and reach hosts; the rules of a valid config live in
// the config package (config.Validate), which opsbot runs before New.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "test")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(key, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	good := func() ops.Config {
		return ops.Config{KeyFile: key, KnownHosts: kh,
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
		{"unknown jump", func(c *ops.Config) {
			c.Hosts["gpu1"] = ops.HostConfig{Addr: "127.0.0.1:22", User: "root", Jump: "bastion"}
		}, "bastion"},
		{"missing key", func(c *ops.Config) { c.KeyFile = filepath.Join(dir, "missing-key") }, "missing-key"},
	}
	rb, err := ops.New(good())
	if err != nil {
		t.Fatalf("the good config: %v", err)
	}
	rb.Close()
	for _, c := range cases {
		cfg := good()
		c.edit(&cfg)
		if _, err := ops.New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one naming %q", c.name, err, c.want)
		}
	}
}
