package commands

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops"
)

// optsReplicas: qwen runs as two replicas, qwen@gpu1 and qwen@gpu3; coder
// is a service of its own on gpu3.
var optsReplicas = Options{Services: []ServiceRef{
	{Name: "coder", Host: "gpu3", Unit: "sglang-coder.service"},
	{Name: "qwen@gpu1", Host: "gpu1", Unit: "sglang-qwen.service", Group: "qwen"},
	{Name: "qwen@gpu3", Host: "gpu3", Unit: "sglang-qwen.service", Group: "qwen"},
}}

// TestReplicaParse: a replica is named GROUP@REPLICA like any service; a
// command naming the group runs on each replica when its policy says so
// (read-only ones), and is refused otherwise, naming the replicas.
func TestReplicaParse(t *testing.T) {
	if err := optsReplicas.Validate(); err != nil {
		t.Fatal(err)
	}
	each := []string{"qwen@gpu1", "qwen@gpu3"}
	ok := []struct {
		in   string
		on   On
		text string
	}{
		{"mtp steps 10 qwen@gpu3", On{Service: "qwen@gpu3", Host: "gpu3"}, "mtp steps 10 qwen@gpu3"},
		{"MTP STEPS 10 Qwen@GPU3", On{Service: "qwen@gpu3", Host: "gpu3"}, "mtp steps 10 qwen@gpu3"},
		{"svc restart qwen@gpu1 --dry-run", On{Service: "qwen@gpu1", Host: "gpu1"}, "svc restart qwen@gpu1 --dry-run"},
		{"svc status qwen", On{Service: "qwen", Replicas: each}, "svc status qwen"},
		{"mtp show qwen", On{Service: "qwen", Replicas: each}, "mtp show qwen"},
		{"history qwen n=5", On{Service: "qwen", Replicas: each}, "history qwen n=5"},
		{"gpu health qwen", On{Service: "qwen", Replicas: each}, "gpu health qwen"},
		{"gpu health qwen@gpu3", On{Service: "qwen@gpu3", Host: "gpu3"}, "gpu health qwen@gpu3"},
		{"gpu status qwen@gpu3", On{Host: "gpu3"}, "gpu status gpu3"},
		{"watchdog silence qwen@gpu1 2h", On{Service: "qwen@gpu1", Host: "gpu1"}, "watchdog silence qwen@gpu1 2h"},
		{"mtp steps 10 qwen", On{Service: "qwen", Replicas: each}, "mtp steps 10 qwen"},
		{"mtp off qwen --dry-run", On{Service: "qwen", Replicas: each}, "mtp off qwen --dry-run"},
		{"engine set mem-fraction-static 0.8 qwen", On{Service: "qwen", Replicas: each}, "engine set mem-fraction-static 0.8 qwen"},
		{"mtp undo qwen", On{Service: "qwen", Replicas: each}, "mtp undo qwen"},
	}
	for _, c := range ok {
		cmd, err := Parse(c.in, optsReplicas)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if on := Where(cmd); !reflect.DeepEqual(on, c.on) {
			t.Errorf("%q acts on %+v, want %+v", c.in, on, c.on)
		}
		if got := Text(cmd); got != c.text {
			t.Errorf("%q renders %q, want %q", c.in, got, c.text)
		}
		again, err := Parse(Text(cmd), optsReplicas)
		if err != nil || !reflect.DeepEqual(again, cmd) {
			t.Errorf("%q: round trip %+v %v", c.in, again, err)
		}
		data, err := Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if dec, err := Decode(data); err != nil || !reflect.DeepEqual(dec, cmd) {
			t.Errorf("%q: encoded %s decodes to %+v %v", c.in, data, dec, err)
		}
	}

	bad := []struct{ in, problem, suggestion string }{
		{"svc restart qwen", "qwen has replicas: name one (qwen@gpu1, qwen@gpu3); svc restart acts on one replica at a time",
			"for example `svc restart qwen@gpu1`"},
		{"sweep qwen steps 1..3", "qwen has replicas: name one (qwen@gpu1, qwen@gpu3)", "for example `sweep qwen@gpu1 steps 1..3`"},
		{"svc logs qwen", "qwen has replicas: name one", ""},
		{"gpu status qwen", "qwen has replicas: name one", ""},
		{"mtp per-load qwen 1:3 8:2", "qwen has replicas: name one (qwen@gpu1, qwen@gpu3)", ""},
		{"mtp steps 10 qwen@gpu9", `unknown service "qwen@gpu9": the services are coder, qwen, qwen@gpu1, qwen@gpu3`, "did you mean `mtp steps 10 qwen@gpu1`?"},
		{"mtp steps 10 qwen@", `"qwen@" is not a replica's name`, ""},
	}
	for _, c := range bad {
		_, err := Parse(c.in, optsReplicas)
		var ue *UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", c.in, err)
			continue
		}
		if !strings.Contains(ue.Problem, c.problem) {
			t.Errorf("%q: problem %q, want %q", c.in, ue.Problem, c.problem)
		}
		if c.suggestion != "" && ue.Suggestion != c.suggestion {
			t.Errorf("%q: suggestion %q, want %q", c.in, ue.Suggestion, c.suggestion)
		}
	}
}

// TestReplicatedDefault: when the one service configured is replicated (or
// default_service names it), a command naming none means the group.
func TestReplicatedDefault(t *testing.T) {
	only := Options{Services: optsReplicas.Services[1:]}
	withDefault := optsReplicas
	withDefault.DefaultService = "qwen"
	for _, opts := range []Options{only, withDefault} {
		if err := opts.Validate(); err != nil {
			t.Fatal(err)
		}
		cmd, err := Parse("svc status", opts)
		if err != nil {
			t.Fatal(err)
		}
		if on := Where(cmd); on.Service != "qwen" || len(on.Replicas) != 2 {
			t.Errorf("svc status acts on %+v", on)
		}
		cmd, err = Parse("mtp steps 4", opts)
		if err != nil {
			t.Fatal(err)
		}
		if !IsRollout(cmd) || !NeedsConfirm(cmd) || len(Where(cmd).Replicas) != 2 {
			t.Errorf("mtp steps 4 on the default replicated service: rollout %v, confirm %v, on %+v", IsRollout(cmd), NeedsConfirm(cmd), Where(cmd))
		}
	}
}

// TestGroupPolicies: what each command does on a replicated service is its
// definition's; the read-only commands named in the design show each
// replica, the changes that roll out are marked so, the rest are refused.
func TestGroupPolicies(t *testing.T) {
	want := map[string]GroupUse{"svc status": GroupEach, "mtp show": GroupEach, "history": GroupEach, "gpu health": GroupEach, "fleet": GroupEach,
		"mtp steps": GroupRollout, "mtp off": GroupRollout, "engine set": GroupRollout, "mtp undo": GroupRollout}
	for _, s := range Specs() {
		w := want[s.Path]
		if s.OnGroup != w {
			t.Errorf("%s: on a group %s, want %s", s.Path, s.OnGroup, w)
		}
		if s.OnGroup == GroupEach && s.Mutating {
			t.Errorf("%s changes things but runs on each replica", s.Path)
		}
	}
}

// TestRolloutConfirmation: a change of a replicated service is confirmed
// with its plan (canary, gate, waves) from the configuration, and its
// undo with what it puts back; a dry run asks for nothing.
func TestRolloutConfirmation(t *testing.T) {
	opts := Options{Services: []ServiceRef{
		{Name: "qwen@gpu1", Host: "gpu1", Unit: "sglang-qwen.service", Group: "qwen", Router: "http://127.0.0.1:30080"},
		{Name: "qwen@gpu2", Host: "gpu2", Unit: "sglang-qwen.service", Group: "qwen", Router: "http://127.0.0.1:30080"},
		{Name: "qwen@gpu3", Host: "gpu3", Unit: "sglang-qwen.service", Group: "qwen", Router: "http://127.0.0.1:30080"},
	}, Rollout: ops.RolloutConfig{MinTokSRatio: 0.95, MaxTTFTP95Ratio: 1.5, MaxUnavailable: 1}}
	cmd, err := Parse("mtp steps 10 qwen", opts)
	if err != nil {
		t.Fatal(err)
	}
	if !NeedsConfirm(cmd) {
		t.Error("a rollout of mtp steps asks for no confirmation")
	}
	got := PreviewIn(cmd, opts)
	for _, want := range []string{"`mtp steps 10 qwen` rolls out", "canary qwen@gpu1", "against qwen@gpu2", "at least 0.95x", "at most 1.5x",
		"\n  2. qwen@gpu2\n  3. qwen@gpu3", "any failure puts every changed replica back"} {
		if !strings.Contains(got, want) {
			t.Errorf("preview lacks %q:\n%s", want, got)
		}
	}
	undo, err := Parse("mtp undo qwen", opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := PreviewIn(undo, opts); !strings.Contains(got, "undo the last rollout of qwen on every replica it changed") {
		t.Errorf("undo preview: %s", got)
	}
	dry, err := Parse("mtp steps 10 qwen --dry-run", opts)
	if err != nil {
		t.Fatal(err)
	}
	if NeedsConfirm(dry) {
		t.Error("a dry run of a rollout asks for confirmation")
	}
}
