package commands

import (
	"reflect"
	"strings"
	"testing"
)

// optsNode is the lab's layout: two containers on the Proxmox node pve, each
// with its half of the node's GPUs, and a service on a host of its own.
var optsNode = Options{
	Services: []ServiceRef{
		{Name: "qwen", Host: "gpu1", Unit: "sglang-qwen.service", Node: "pve", GPUs: []int{0, 1, 2, 3}},
		{Name: "coder", Host: "gpu2", Unit: "sglang-coder.service", Node: "pve", GPUs: []int{4, 5, 6, 7}},
		{Name: "solo", Host: "box", Unit: "vllm-solo.service"},
	},
	Hosts: []string{"gpu1", "gpu2", "pve", "box"},
}

func TestParseGPUReset(t *testing.T) {
	for _, c := range []struct {
		opts Options
		in   string
		text string
		want *GPUReset
	}{
		{optsNode, "gpu reset 2 pve", "gpu reset 2 pve", &GPUReset{GPUs: []int{2}, Node: "pve", Services: []string{"qwen"}}},
		{optsNode, "gpu reset 3 2 qwen", "gpu reset 2 3 pve", &GPUReset{GPUs: []int{2, 3}, Node: "pve", Services: []string{"qwen"}}},
		{optsNode, "gpu reset 2,3 5 gpu2 --dry-run", "gpu reset 2 3 5 pve --dry-run", &GPUReset{GPUs: []int{2, 3, 5}, Node: "pve", Services: []string{"coder", "qwen"}, DryRun: true}},
		{optsNode, "gpu reset 0 box", "gpu reset 0 box", &GPUReset{GPUs: []int{0}, Node: "box", Services: []string{"solo"}}},
		{optsOne, "gpu reset 1", "gpu reset 1 gpu1", &GPUReset{GPUs: []int{1}, Node: "gpu1", Services: []string{"qwen"}}},
	} {
		got, err := Parse(c.in, c.opts)
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if !reflect.DeepEqual(got, Command(c.want)) {
			t.Errorf("%q: got %+v, want %+v", c.in, got, c.want)
		}
		if Text(got) != c.text {
			t.Errorf("%q: text %q, want %q", c.in, Text(got), c.text)
		}
		data, err := Encode(got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(data)
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("%q: round trip %+v, %v", c.in, back, err)
		}
		if RoleOf(got) != Admin || NeedsConfirm(got) == c.want.DryRun {
			t.Errorf("%q: role %s, confirm %v", c.in, RoleOf(got), NeedsConfirm(got))
		}
	}
}

func TestParseGPUResetBad(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"gpu reset", "needs the GPUs to reset"},
		{"gpu reset pve 2", "is not a GPU index"},
		{"gpu reset 2 2 pve", "GPU 2 is given twice"},
		{"gpu reset 64 pve", "between 0 and 63"},
		{"gpu reset 2 nowhere", "owns no configured service's GPUs: the machines are pve, box"},
		{"gpu reset 2", "needs the machine that owns the GPUs: one of pve, box"},
	} {
		_, err := Parse(c.in, optsNode)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.want)
		}
	}
}

// The confirmation names the services on the GPUs, with their units and
// hosts, what happens to persistence, and the node's other services it
// leaves alone; a GPU two services share names both.
func TestGPUResetPreview(t *testing.T) {
	c, err := Parse("gpu reset 2 pve", optsNode)
	if err != nil {
		t.Fatal(err)
	}
	p := PreviewIn(c, optsNode)
	for _, want := range []string{"reset GPU 2 of pve", "refused if any process holds them", "nvidia-smi -pm 0 -i N", "nvidia-persistenced is stopped",
		"`nvidia-smi --gpu-reset -i 2`", "qwen (sglang-qwen.service on gpu1)", "if their units are enabled", "Not touched: coder"} {
		if !strings.Contains(p, want) {
			t.Errorf("preview lacks %q:\n%s", want, p)
		}
	}
	shared := optsNode
	shared.Services = append([]ServiceRef{{Name: "embed", Host: "gpu3", Unit: "embed.service", Node: "pve", GPUs: []int{2}}}, optsNode.Services...)
	c, err = Parse("gpu reset 2 pve", shared)
	if err != nil {
		t.Fatal(err)
	}
	p = PreviewIn(c, shared)
	if !strings.Contains(p, "embed (embed.service on gpu3), qwen (sglang-qwen.service on gpu1)") || !strings.Contains(p, "(embed, qwen must be stopped for the reset)") {
		t.Errorf("a shared GPU's preview does not name both services:\n%s", p)
	}
}
