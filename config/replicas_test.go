package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
)

// replicated is a config with qwen as two replicas behind a router (gpu1,
// and gpu3's second replica named gpu3b with a unit of its own), and coder,
// a plain service on gpu3's other GPUs.
const replicated = `
store: {path: opsbot.db}
ssh: {key_file: id_ed25519, known_hosts: known_hosts}
hosts:
  gpu1: {addr: "127.0.0.1:2222", user: root}
  gpu3: {addr: "127.0.0.1:2223", user: root}
services:
  qwen:
    unit: sglang-qwen.service
    auto_recover: true
    router: {url: "http://127.0.0.1:30080"}
    replicas:
      - {host: gpu1, gpus: [0, 1, 2, 3], url: "http://127.0.0.1:30000"}
      - {host: gpu3, gpus: [0, 1], url: "http://127.0.0.1:30001", name: gpu3b, unit: sglang-qwen-b.service, worker_url: "http://10.0.0.3:30001", via_ssh: true}
  coder: {host: gpu3, unit: sglang-coder.service, url: "http://127.0.0.1:30002", gpus: [2, 3]}
auth:
  users: {"console:alice": {operator: [qwen], viewer: "*"}, "console:bob": {operator: [qwen@gpu1]}}
  two_person: {commands: ["svc stop qwen"]}
`

// TestReplicasExpand: each replica is a service of its own, GROUP@REPLICA,
// with its host, url, gpus, unit and via_ssh, and its group's other keys;
// the group is no instance; the runbook's config carries the replica, its
// router and the rollout's defaults.
func TestReplicasExpand(t *testing.T) {
	c, err := Parse([]byte(replicated), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ServiceNames(); !slices.Equal(got, []string{"coder", "qwen@gpu1", "qwen@gpu3b"}) {
		t.Fatalf("service names %q", got)
	}
	if got := c.NamedServices(); !slices.Equal(got, []string{"coder", "qwen", "qwen@gpu1", "qwen@gpu3b"}) {
		t.Fatalf("named services %q", got)
	}
	if got := c.ReplicasOf("qwen"); !slices.Equal(got, []string{"qwen@gpu1", "qwen@gpu3b"}) {
		t.Fatalf("replicas of qwen %q", got)
	}
	if c.ReplicasOf("coder") != nil {
		t.Fatal("coder has no replicas")
	}
	b, ok := c.Instance("qwen@gpu3b")
	if !ok || b.Group != "qwen" || b.Replica != "gpu3b" || b.Service.Host != "gpu3" || b.Service.Unit != "sglang-qwen-b.service" ||
		!b.Service.ViaSSH || !b.Service.AutoRecover || b.Service.Engine != DefaultEngine || !slices.Equal(b.Service.GPUs, []int{0, 1}) {
		t.Fatalf("qwen@gpu3b: %+v", b)
	}
	if _, ok := c.Instance("qwen"); ok {
		t.Fatal("the group is an instance")
	}
	ops := c.OpsServices()
	a := ops["qwen@gpu1"]
	if a.Host != "gpu1" || a.Unit != "sglang-qwen.service" || a.ViaSSH || a.Replica == nil || a.Replica.Group != "qwen" || a.Replica.Name != "gpu1" ||
		a.Replica.Router == nil || a.Replica.Router.URL != "http://127.0.0.1:30080" || a.Replica.Router.Kind != "sglang" ||
		a.Replica.Router.Worker != "http://127.0.0.1:30000" || a.AdaptiveConfig != "/etc/sglang/qwen@gpu1-adaptive.json" {
		t.Fatalf("ops qwen@gpu1: %+v %+v", a, a.Replica)
	}
	if w := ops["qwen@gpu3b"].Replica.Router.Worker; w != "http://10.0.0.3:30001" {
		t.Fatalf("worker url %q", w)
	}
	if ops["coder"].Replica != nil {
		t.Fatal("coder is no replica")
	}
	if r := c.OpsRollout(); r.MinTokSRatio != 0.97 || r.MaxTTFTP95Ratio != 1.2 || r.MaxUnavailable != 1 {
		t.Fatalf("rollout defaults %+v", r)
	}
	if err := c.CommandOptions().Validate(); err != nil {
		t.Fatalf("command options: %v", err)
	}
	c, err = Parse([]byte(replicated+"rollout: {gate: {min_tok_s_ratio: 0.9, max_ttft_p95_ratio: 1.5}}\n"), "/etc/opsbot", env(nil))
	if err != nil || c.Rollout.Gate.MinTokSRatio != 0.9 || c.Rollout.Gate.MaxTTFTP95Ratio != 1.5 {
		t.Fatalf("rollout as set: %+v %v", c.Rollout, err)
	}
	// Schedules and default_service may name a replica; a replicated service
	// is a default too (its commands decide what a group means).
	for _, extra := range []string{"default_service: qwen@gpu1\n", "default_service: qwen\n"} {
		if _, err := Parse([]byte(replicated+extra), "/etc/opsbot", env(nil)); err != nil {
			t.Errorf("%q: %v", extra, err)
		}
	}
	// A two-person rule on the group covers each replica.
	r, _ := c.Auth.TwoPerson.Rules()
	if len(r) != 1 || !r[0].Matches("svc stop", "qwen@gpu3b") || r[0].Matches("svc stop", "coder") {
		t.Fatalf("rule %+v", r)
	}
}

// TestBadReplicas: each mistake in a replicated service is named with its
// key path and what to do, all at once.
func TestBadReplicas(t *testing.T) {
	sub := func(old, new string) string {
		if !strings.Contains(replicated, old) {
			t.Fatalf("no %q in the config", old)
		}
		return strings.Replace(replicated, old, new, 1)
	}
	cases := []struct{ name, text, want string }{
		{"group with a host", sub("unit: sglang-qwen.service\n    auto_recover", "unit: sglang-qwen.service\n    host: gpu1\n    auto_recover"),
			"services.qwen.host: a service with replicas has no host of its own: set it on each replica (services.qwen.replicas[].host)"},
		{"group with gpus", sub("    auto_recover: true\n", "    auto_recover: true\n    gpus: [0]\n"), "services.qwen.gpus: a service with replicas has no gpus of its own"},
		{"group with a url", sub("    auto_recover: true\n", "    auto_recover: true\n    url: \"http://127.0.0.1:1\"\n"), "services.qwen.url: a service with replicas has no url of its own"},
		{"unknown replica host", sub("{host: gpu1, gpus", "{host: gpu2, gpus"), `services.qwen.replicas[0].host names unknown host "gpu2"`},
		{"name taken", sub("name: gpu3b", "name: gpu1"), "services.qwen.replicas[1]: the name gpu1 is taken by services.qwen.replicas[0]"},
		{"bad name", sub("name: gpu3b", "name: Gpu3"), `services.qwen.replicas[1]: the replica's name "Gpu3" (its name, else its host) is not a name`},
		{"replica url", sub(`url: "http://127.0.0.1:30000"`, `url: "127.0.0.1:30000"`), `services.qwen.replicas[0].url must be the engine's http(s) base URL`},
		{"worker url", sub(`worker_url: "http://10.0.0.3:30001"`, `worker_url: "10.0.0.3"`), `services.qwen.replicas[1].worker_url must be`},
		{"overlapping GPUs", sub("gpus: [0, 1], url", "gpus: [1, 2], url"),
			"services.qwen.replicas[1]: its GPUs (1,2) on gpu3 overlap those of coder (2,3): each GPU serves one engine"},
		{"replicas on one host share a unit", sub("{host: gpu3, gpus: [0, 1], url: \"http://127.0.0.1:30001\", name: gpu3b, unit: sglang-qwen-b.service",
			"{host: gpu1, gpus: [4], url: \"http://127.0.0.1:30001\", name: gpu1b"),
			"services.qwen.replicas[1]: host gpu1 already runs sglang-qwen.service as qwen@gpu1: give this replica a unit of its own"},
		{"no unit", sub("    unit: sglang-qwen.service\n", ""), `services.qwen.replicas[0].unit must be a unit name like sglang-qwen.service (or the service's unit, shared by its replicas), got ""`},
		{"router url", sub(`router: {url: "http://127.0.0.1:30080"}`, `router: {url: "localhost"}`), `services.qwen.router.url must be the router's http(s) base URL`},
		{"router kind", sub(`router: {url: "http://127.0.0.1:30080"}`, `router: {url: "http://127.0.0.1:30080", kind: nginx}`),
			`services.qwen.router.kind must be sglang (the router's worker API), got "nginx"`},
		{"router without replicas", sub(`gpus: [2, 3]}`, `gpus: [2, 3], router: {url: "http://127.0.0.1:1"}}`),
			"services.coder.router: only a service with replicas has a router"},
		{"one replica", sub("      - {host: gpu3, gpus: [0, 1], url: \"http://127.0.0.1:30001\", name: gpu3b, unit: sglang-qwen-b.service, worker_url: \"http://10.0.0.3:30001\", via_ssh: true}\n", ""),
			"services.qwen.replicas: 1 replica(s), and rollout.max_unavailable is 1: a change takes at most max_unavailable replicas out at once and at least one must keep serving"},
		{"max_unavailable all", replicated + "rollout: {max_unavailable: 2}\n", "services.qwen.replicas: 2 replica(s), and rollout.max_unavailable is 2"},
		{"max_unavailable negative", replicated + "rollout: {max_unavailable: -1}\n", "rollout.max_unavailable must be at least 1"},
		{"drain_timeout too short", replicated + "rollout: {drain_timeout: 100ms}\n", "rollout.drain_timeout must be within 1s..1h"},
		{"unavailable_wait too long", replicated + "rollout: {unavailable_wait: 48h}\n", "rollout.unavailable_wait must be within 1s..24h"},
		{"tok/s ratio above 1", replicated + "rollout: {gate: {min_tok_s_ratio: 1.5}}\n", "rollout.gate.min_tok_s_ratio must be within 0.5..1 (the lowest canary/sibling output tok/s that passes; 0.97 allows a 3% drop), got 1.5"},
		{"ttft ratio below 1", replicated + "rollout: {gate: {max_ttft_p95_ratio: 0.8}}\n", "rollout.gate.max_ttft_p95_ratio must be within 1..5"},
		{"ratio not a number", replicated + "rollout: {gate: {min_tok_s_ratio: high}}\n", `rollout.gate.min_tok_s_ratio: expected a number, got "high"`},
		{"misspelt replica key", sub("name: gpu3b", "nmae: gpu3b"), "services.qwen.replicas[1].nmae: unknown key (line 14); did you mean services.qwen.replicas[1].name?"},
		{"misspelt rollout key", replicated + "rollout: {max_unavailible: 1}\n", "rollout.max_unavailible: unknown key (line 19); did you mean rollout.max_unavailable?"},
		{"grant on an unknown replica", sub(`[qwen@gpu1]`, `[qwen@gpu9]`), `unknown service "qwen@gpu9"`},
		{"schedule on the group", replicated + "schedules: [{cron: \"0 3 * * *\", command: \"svc restart qwen\", as: \"console:alice\", to: \"console:ops\"}]\n",
			"schedules[0].command: qwen has replicas: name one (qwen@gpu1, qwen@gpu3b); svc restart acts on one replica at a time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.text), "/etc/opsbot", env(nil))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a config error", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got\n%v\nwant a problem containing\n%s", err, c.want)
			}
		})
	}
}

// TestReplicaNamesParse: the command language takes a replica by name and
// a replicated service as its commands' policies say.
func TestReplicaNamesParse(t *testing.T) {
	c, err := Parse([]byte(replicated), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := commands.Parse("mtp steps 10 qwen@gpu3b", c.CommandOptions())
	if err != nil {
		t.Fatal(err)
	}
	if on := commands.Where(cmd); on.Service != "qwen@gpu3b" || on.Host != "gpu3" {
		t.Fatalf("on %+v", on)
	}
}

// TestCanaryIsTheFirstReplicaAsConfigured: a rollout's canary is the first
// replica the config lists, its waves follow the list, whatever the names'
// order; the confirmation's plan (commands) and the runbook's agree.
func TestCanaryIsTheFirstReplicaAsConfigured(t *testing.T) {
	const cfg = `
store: {path: opsbot.db}
ssh: {key_file: id_ed25519, known_hosts: known_hosts}
hosts:
  gpu9: {addr: "127.0.0.1:2222", user: root}
  gpu2: {addr: "127.0.0.1:2223", user: root}
  gpu5: {addr: "127.0.0.1:2224", user: root}
services:
  qwen:
    unit: sglang-qwen.service
    router: {url: "http://127.0.0.1:30080"}
    replicas:
      - {host: gpu9, url: "http://127.0.0.1:30000"}
      - {host: gpu2, url: "http://127.0.0.1:30001"}
      - {host: gpu5, url: "http://127.0.0.1:30002"}
`
	c, err := Parse([]byte(cfg), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := ops.RolloutPlanOf(c.OpsServices(), c.OpsRollout(), "qwen", ops.Change{})
	if err != nil {
		t.Fatal(err)
	}
	var waves []string
	for _, w := range plan.Waves {
		waves = append(waves, w...)
	}
	if plan.Canary != "qwen@gpu9" || !slices.Equal(waves, []string{"qwen@gpu2", "qwen@gpu5"}) {
		t.Fatalf("canary %s, waves %v: want qwen@gpu9 first, then gpu2 and gpu5 as configured", plan.Canary, plan.Waves)
	}
	cmd, err := commands.Parse("mtp steps 4 qwen", c.CommandOptions())
	if err != nil {
		t.Fatal(err)
	}
	if text := commands.PreviewIn(cmd, c.CommandOptions()); !strings.Contains(text, "canary qwen@gpu9") {
		t.Fatalf("confirmation %q: want the canary qwen@gpu9", text)
	}
}
