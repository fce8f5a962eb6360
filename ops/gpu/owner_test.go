package gpu

import "testing"

// TestScopeOwner is the ownership rule of reaping: a process is the service's
// only in its unit's cgroup or orphaned from it inside its own container (or,
// on a bare host, orphaned to the root cgroup); never another unit's, another
// container's, the node's, or a GPU daemon, whatever its command line.
func TestScopeOwner(t *testing.T) {
	pve := Scope{Unit: "sglang-qwen.service", VMID: 129}
	plain := Scope{Unit: "sglang-qwen.service", Container: "gpu1"}
	bare := Scope{Unit: "sglang-qwen.service"}
	engine := "sglang::scheduler_TP0"
	for _, tc := range []struct {
		name  string
		scope Scope
		cg    string
		ppid  int
		cmd   string
		ours  bool
		whose string
	}{
		{"proxmox 7+ unit", pve, "/lxc/129/ns/system.slice/sglang-qwen.service", 4000, engine, true, "unit sglang-qwen.service"},
		{"proxmox unit sub-cgroup", pve, "/lxc/129/ns/system.slice/sglang-qwen.service/workers", 4000, engine, true, "unit sglang-qwen.service"},
		{"proxmox left-over after a KillMode=process stop", pve, "/lxc/129/ns/system.slice/sglang-qwen.service", 1, engine, true, "unit sglang-qwen.service"},
		{"proxmox orphan in the container's root", pve, "/lxc/129/ns/", 1, engine, true, "orphan in container 129"},
		{"proxmox orphan, no trailing slash", pve, "/lxc/129/ns", 1, engine, true, "orphan in container 129"},
		{"proxmox orphan in a bare slice", pve, "/lxc/129/ns/system.slice", 1, engine, true, "orphan in container 129"},
		{"proxmox without ns", pve, "/lxc/129/system.slice/sglang-qwen.service", 4000, engine, true, "unit sglang-qwen.service"},
		{"proxmox another unit, same container", pve, "/lxc/129/ns/system.slice/sglang-draft.service", 1, engine, false, "unit sglang-draft.service"},
		{"proxmox a session, same container", pve, "/lxc/129/ns/user.slice/user-0.slice/session-3.scope", 700, engine, false, "unit session-3.scope"},
		{"proxmox container init", pve, "/lxc/129/ns/init.scope", 0, "/sbin/init", false, "unit init.scope"},
		{"proxmox another container, same unit name", pve, "/lxc/130/ns/system.slice/sglang-qwen.service", 1, engine, false, "container 130"},
		{"proxmox another container's orphan", pve, "/lxc/130/ns/", 1, engine, false, "container 130"},
		{"proxmox vmid prefix is not a match", pve, "/lxc/1290/ns/system.slice/sglang-qwen.service", 1, engine, false, "container 1290"},
		{"proxmox lxc monitor", pve, "/lxc.monitor/129", 1, "[lxc monitor] /var/lib/lxc 129", false, "the LXC monitor (/lxc.monitor/129)"},
		{"proxmox node slice", pve, "/system.slice/nvidia-dcgm.service", 1, "python3 -m sglang.launch_server", false, "the node (/system.slice/nvidia-dcgm.service)"},
		{"proxmox node session", pve, "/user.slice/user-0.slice/session-1.scope", 1, engine, false, "the node (/user.slice/user-0.slice/session-1.scope)"},
		{"proxmox node root", pve, "/", 1, engine, false, "the node (/)"},
		{"daemon in our unit", pve, "/lxc/129/ns/system.slice/sglang-qwen.service", 1, "/usr/bin/nvidia-persistenced --verbose", false, "a GPU daemon"},
		{"dcgm on the node", pve, "/system.slice/nvidia-dcgm.service", 1, "/usr/bin/nv-hostengine -n", false, "a GPU daemon"},
		{"unknown cgroup", pve, "", 1, engine, false, "unknown (no cgroup)"},
		{"raw 0:: form", pve, "0::/lxc/129/ns/system.slice/sglang-qwen.service", 1, engine, true, "unit sglang-qwen.service"},
		{"plain lxc unit", plain, "/lxc.payload.gpu1/system.slice/sglang-qwen.service", 40, engine, true, "unit sglang-qwen.service"},
		{"plain lxc orphan", plain, "/lxc.payload.gpu1/", 1, engine, true, "orphan in container gpu1"},
		{"plain lxc another container", plain, "/lxc.payload.gpu2/system.slice/sglang-qwen.service", 1, engine, false, "container gpu2"},
		{"plain lxc name prefix is not a match", plain, "/lxc.payload.gpu10/", 1, engine, false, "container gpu10"},
		{"plain lxc another unit", plain, "/lxc.payload.gpu1/system.slice/other.service", 1, engine, false, "unit other.service"},
		{"bare unit", bare, "/system.slice/sglang-qwen.service", 4000, engine, true, "unit sglang-qwen.service"},
		{"bare left-over, parent 1", bare, "/system.slice/sglang-qwen.service", 1, engine, true, "unit sglang-qwen.service"},
		{"bare orphan in the root cgroup", bare, "/", 1, engine, true, "orphan (parent 1, root cgroup)"},
		{"bare root cgroup, not an orphan", bare, "/", 812, engine, false, "the host (/)"},
		{"bare another unit", bare, "/system.slice/vllm-llama.service", 1, engine, false, "unit vllm-llama.service"},
		{"bare a session", bare, "/user.slice/user-1000.slice/session-2.scope", 1, engine, false, "unit session-2.scope"},
		{"bare a container", bare, "/lxc/130/ns/system.slice/sglang-qwen.service", 1, engine, false, "container 130"},
		{"bare unit name prefix is not a match", bare, "/system.slice/sglang-qwen.service2", 1, engine, false, "the host (/system.slice/sglang-qwen.service2)"},
	} {
		p := Process{PID: 4242, PPID: tc.ppid, Cgroup: tc.cg, Cmdline: tc.cmd, Daemon: IsDaemon(tc.cmd), Engine: IsEngine(tc.cmd)}
		got := tc.scope.Owner(p)
		if got.Service != tc.ours || got.Whose != tc.whose {
			t.Errorf("%s: Owner(%q, ppid %d) = %+v, want service=%v whose=%q", tc.name, tc.cg, tc.ppid, got, tc.ours, tc.whose)
		}
	}
}

func TestProcessOnGPU(t *testing.T) {
	p := Process{GPUs: []HeldGPU{{Index: 0, UUID: "GPU-a"}, {Index: 5, UUID: ""}}}
	for _, tc := range []struct {
		uuid  string
		index int
		want  bool
	}{
		{"GPU-a", 3, true},  // UUIDs decide when both are known: indexes are per host
		{"GPU-b", 0, false}, // same index, another GPU
		{"GPU-c", 5, true},  // its UUID unknown: the index decides
		{"", 0, true},
		{"", 1, false},
	} {
		if got := p.OnGPU(tc.uuid, tc.index); got != tc.want {
			t.Errorf("OnGPU(%q, %d) = %v, want %v", tc.uuid, tc.index, got, tc.want)
		}
	}
}
