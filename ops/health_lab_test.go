package ops_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/gpu"
)

// `gpu health` on the lab's node gives each GPU the verdict its faults call
// for, with the services on it and the action that helps next: the facts
// read from the node (nvidia-smi's query form and journalctl -k), never from
// the containers.
func TestGPUHealthVerdictsOnTheLab(t *testing.T) {
	t.Parallel()
	r := newRig(t, labOpts(
		lab.Fault{Name: "xid", XID: 79, GPU: 2},
		lab.Fault{Name: "remap-pending", GPU: 1},
		lab.Fault{Name: "pcie-degraded", GPU: 5},
		lab.Fault{Name: "xid", XID: 13, GPU: 6},
	), nil)
	if err := r.lab.InjectXID(7, 64); err != nil {
		t.Fatal(err)
	}
	r.lab.SetRemapFailure(4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := r.rb.GPUHealth(ctx, "", "pve", ops.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Health) != 8 {
		t.Fatalf("%d GPUs, want 8:\n%s", len(res.Health), strings.Join(res.Details, "\n"))
	}
	want := map[int]gpu.Verdict{0: gpu.Healthy, 1: gpu.ResetNeeded, 2: gpu.RebootNeeded, 3: gpu.Healthy,
		4: gpu.Replace, 5: gpu.Degraded, 6: gpu.Healthy, 7: gpu.RebootNeeded}
	for _, g := range res.Health {
		if g.Verdict != want[g.GPU.Index] {
			t.Errorf("GPU %d: verdict %s, want %s (findings %+v)", g.GPU.Index, g.Verdict, want[g.GPU.Index], g.Findings)
		}
		wantSvc := "qwen"
		if g.GPU.Index >= 4 {
			wantSvc = "coder"
		}
		if len(g.Services) != 1 || g.Services[0] != wantSvc {
			t.Errorf("GPU %d: services %v, want [%s]", g.GPU.Index, g.Services, wantSvc)
		}
	}
	text := res.Summary + "\n" + strings.Join(res.Details, "\n")
	for _, s := range []string{
		"pve GPU 2 (qwen, 00000000:58:00.0): reboot needed",
		"next: reboot pve (it takes down coder, qwen)",
		"Xid 79 GPU has fallen off the bus (1 in 24 h",
		"docs.nvidia.com/deploy/xid-errors",
		"pve GPU 1 (qwen, 00000000:38:00.0): reset needed",
		"`gpu reset 1 pve` (admin)",
		"PCIe link x8 of x16",
		"[the software's, not the GPU's]",
		"hardware: replace (pve GPU 4)",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("health text lacks %q:\n%s", s, text)
		}
	}
	// A service's own GPUs only.
	res, err = r.rb.GPUHealth(ctx, "qwen", "", ops.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Health) != 4 || res.Health[3].GPU.Index != 3 {
		t.Errorf("gpu health qwen: %d GPUs, want qwen's 0-3", len(res.Health))
	}
}
