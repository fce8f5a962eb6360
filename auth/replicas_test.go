package auth

import (
	"slices"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
)

// replicatedConfig: qwen runs as replicas on gpu1 (LXC on node pve, GPUs
// 0-1) and gpu3 (GPUs 0-1); coder shares node pve with qwen@gpu1 on GPUs
// 2-3 (config check refuses a replica whose GPUs overlap another's);
// alice is operator on qwen, bob on qwen@gpu3 only, carol on coder and qwen.
const replicatedConfig = `
store: {path: opsbot.db}
ssh: {key_file: id_ed25519, known_hosts: known_hosts}
hosts:
  pve: {addr: "127.0.0.1:2220", user: root}
  gpu1: {addr: "127.0.0.1:2221", user: root}
  gpu2: {addr: "127.0.0.1:2222", user: root}
  gpu3: {addr: "127.0.0.1:2223", user: root}
services:
  qwen:
    unit: sglang-qwen.service
    replicas:
      - {host: gpu1, gpus: [0, 1], url: "http://127.0.0.1:30000", proxmox: {node: pve, vmid: 129}}
      - {host: gpu3, gpus: [0, 1], url: "http://127.0.0.1:30001"}
  coder: {host: gpu2, unit: sglang-coder.service, url: "http://127.0.0.1:30002", gpus: [2, 3], proxmox: {node: pve, vmid: 130}}
auth:
  users:
    "console:alice": {operator: [qwen]}
    "console:bob": {operator: [qwen@gpu3]}
    "console:carol": {operator: [coder, qwen]}
`

// TestGrantsCoverReplicas: a role on a replicated service is a role on each
// replica; a role on one replica is not one on its siblings; a command on
// the group needs the role on every replica; a command that may reap on a
// replica's node needs it on the services sharing its GPUs there (none:
// replicas share no GPU), and one on a neighbour's GPUs touches no replica.
func TestGrantsCoverReplicas(t *testing.T) {
	cfg, err := config.Parse([]byte(replicatedConfig), "/etc/opsbot", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := cfg.CommandOptions()
	parse := func(text string) commands.Command {
		t.Helper()
		c, err := commands.Parse(text, opts)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		return c
	}
	roles := []struct {
		user, service string
		want          commands.Role
	}{
		{"alice", "qwen@gpu1", commands.Operator},
		{"alice", "qwen@gpu3", commands.Operator},
		{"alice", "coder", RoleNone},
		{"bob", "qwen@gpu3", commands.Operator},
		{"bob", "qwen@gpu1", RoleNone},
	}
	for _, r := range roles {
		if got := a.RoleOn("console", "", r.user, r.service); got != r.want {
			t.Errorf("%s on %s: %s, want %s", r.user, r.service, RoleName(got), RoleName(r.want))
		}
	}

	if got := a.Scope().Touched(parse("svc status qwen")); !slices.Equal(got, []string{"qwen@gpu1", "qwen@gpu3"}) {
		t.Errorf("svc status qwen touches %q", got)
	}
	// mtp steps may reap its service's GPUs on its node: qwen@gpu1's on pve
	// are its own; coder's (2-3) are not qwen@gpu1's (0-1).
	for text, want := range map[string][]string{"mtp steps 5 qwen@gpu1": {"qwen@gpu1"}, "mtp steps 5 qwen@gpu3": {"qwen@gpu3"},
		"mtp steps 5 coder": {"coder"}, "gpu status pve": {"coder", "qwen@gpu1"}} {
		if got := a.Scope().Touched(parse(text)); !slices.Equal(got, want) {
			t.Errorf("%q touches %q, want %q", text, got, want)
		}
	}

	decisions := []struct {
		user, text string
		ok         bool
		lacking    []string
	}{
		{"alice", "mtp steps 5 qwen@gpu3", true, nil},
		{"alice", "mtp steps 5 qwen@gpu1", true, nil},
		{"alice", "mtp steps 5 coder", false, []string{"coder"}},
		{"carol", "mtp steps 5 qwen@gpu1", true, nil},
		{"bob", "mtp steps 5 qwen@gpu3", true, nil},
		{"bob", "mtp steps 5 qwen@gpu1", false, []string{"qwen@gpu1"}},
	}
	for _, d := range decisions {
		p := a.Permit("console", "", d.user, parse(d.text))
		if p.OK != d.ok || !slices.Equal(p.Lacking, d.lacking) {
			t.Errorf("%s: %q: ok %v lacking %q, want %v %q", d.user, d.text, p.OK, p.Lacking, d.ok, d.lacking)
		}
	}
	// A command on the group needs the role on every replica: bob holds it
	// on qwen@gpu3 only.
	p := a.Permit("console", "", "bob", parse("svc status qwen"))
	if p.OK || !slices.Equal(p.Lacking, []string{"qwen@gpu1"}) {
		t.Errorf("bob: svc status qwen: %+v", p)
	}
	want := "`svc status qwen` acts on each replica of qwen, so it needs the viewer role on each of qwen@gpu1, qwen@gpu3; you lack it on qwen@gpu1. You may change: qwen@gpu3."
	if msg := a.Refusal("console", "", "bob", parse("svc status qwen"), p); !strings.HasPrefix(msg, want) {
		t.Errorf("refusal\n%s\nwant it to start\n%s", msg, want)
	}
	if p := a.Permit("console", "", "alice", parse("svc status qwen")); !p.OK {
		t.Errorf("alice: svc status qwen: %+v", p)
	}
}
