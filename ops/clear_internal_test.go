package ops

import (
	"slices"
	"testing"

	"github.com/opsbot/opsbot/ops/gpu"
)

// TestSortHolders is the decision of clearGPUs on a node whose GPUs 0-3 are
// qwen's (LXC 129) and 4-7 a neighbour's (LXC 130): reaped only when on
// qwen's GPUs, qwen's own and an engine (or any with force); a holder of
// /dev/nvidiactl alone holds no GPU of qwen's and is left alone, said so; a
// neighbour on its own GPUs is none of qwen's business and not listed.
func TestSortHolders(t *testing.T) {
	t.Parallel()
	tg := &target{name: "qwen", cfg: ServiceConfig{GPUs: []int{0, 1, 2, 3}}, nodeName: "pve",
		scope: gpu.Scope{Unit: "sglang-qwen.service", VMID: 129}}
	var gpus []gpu.GPU
	for i := range 8 {
		gpus = append(gpus, gpu.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Known: true})
	}
	on := func(i, mib int) []gpu.HeldGPU {
		return []gpu.HeldGPU{{Index: i, UUID: "GPU-" + string(rune('a'+i)), UsedMiB: mib}}
	}
	const unitCG, orphanCG = "/lxc/129/ns/system.slice/sglang-qwen.service", "/lxc/129/ns/"
	holders := []gpu.Process{
		{PID: 10, Cmdline: "sglang::scheduler_TP0", Engine: true, Cgroup: unitCG, UsedMiB: 70000, GPUs: on(0, 70000)},       // kill
		{PID: 11, Cmdline: "sglang::scheduler_TP1", Engine: true, Cgroup: orphanCG, UsedMiB: 70000, GPUs: on(1, 70000)},     // kill: orphan
		{PID: 12, Cmdline: "python3 eval.py", Cgroup: orphanCG, UsedMiB: 3000, GPUs: on(2, 3000)},                           // force only
		{PID: 13, Cmdline: "sglang::scheduler_TP0", Engine: true, Cgroup: "/lxc/130/ns/", UsedMiB: 2000, GPUs: on(3, 2000)}, // neighbour on ours
		{PID: 14, Cmdline: "sglang::scheduler_TP0", Engine: true, Cgroup: "/lxc/130/ns/system.slice/sglang-coder.service", UsedMiB: 70000, GPUs: on(4, 70000)},
		{PID: 15, Cmdline: "sglang::scheduler_TP3", Engine: true, Cgroup: orphanCG, UsedMiB: 1000, GPUs: on(5, 1000)}, // ours, not on our GPUs
		{PID: 16, Cmdline: "sglang::detokenizer", Engine: true, Cgroup: unitCG},                                       // nvidiactl only
		{PID: 17, Cmdline: "/usr/bin/nvidia-persistenced", Daemon: true, Cgroup: "/system.slice/nvidia-persistenced.service", GPUs: on(0, 0)},
		{PID: 18, Cmdline: "python3 train.py", Cgroup: "/user.slice/user-0.slice/session-1.scope", UsedMiB: 6000, GPUs: on(0, 6000)},
	}
	pids := func(ps []gpu.Process) []int {
		var out []int
		for _, p := range ps {
			out = append(out, p.PID)
		}
		return out
	}
	alone := func(s sorted) []int {
		var out []int
		for _, a := range s.alone {
			out = append(out, a.p.PID)
		}
		return out
	}
	s := sortHolders(tg, gpus, holders, false)
	if !slices.Equal(pids(s.kill), []int{10, 11}) || !slices.Equal(alone(s), []int{12, 13, 16, 18}) {
		t.Fatalf("kill %v alone %v", pids(s.kill), alone(s))
	}
	if want := map[int]int{0: 6000, 2: 3000, 3: 2000}; len(s.kept) != len(want) || s.kept[0] != 6000 || s.kept[2] != 3000 || s.kept[3] != 2000 {
		t.Fatalf("kept %v, want %v", s.kept, want)
	}
	want := "PID 12 (python3 eval.py) on pve GPU 2, 3000 MiB: not an engine process (`gpu recover qwen --force` would kill it); " +
		"PID 13 (sglang::scheduler_TP0) on pve GPU 3, 2000 MiB: container 130, not qwen's: never killed; " +
		"PID 16 (sglang::detokenizer): holds only /dev/nvidiactl or /dev/nvidia-uvm, no GPU of qwen's; " +
		"PID 18 (python3 train.py) on pve GPU 0, 6000 MiB: the node (/user.slice/user-0.slice/session-1.scope), not qwen's: never killed"
	if got := s.describeAlone(tg); got != want {
		t.Fatalf("described\n%s\nwant\n%s", got, want)
	}
	f := sortHolders(tg, gpus, holders, true)
	if !slices.Equal(pids(f.kill), []int{10, 11, 12}) || !slices.Equal(alone(f), []int{13, 16, 18}) {
		t.Fatalf("with force: kill %v alone %v", pids(f.kill), alone(f))
	}
}
