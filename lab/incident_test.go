package lab

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// showMap runs `systemctl show -p ...` and parses the Key=Value lines.
func showMap(t testing.TB, c *testClient, unit string, props ...string) map[string]string {
	t.Helper()
	out := c.must(t, "systemctl", "show", "-p", strings.Join(props, ","), unit)
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		m[k] = v
	}
	return m
}

// gpuUsed reads the memory used on qwen's GPUs (0-3); coder holds GPUs 4-7.
func gpuUsed(t testing.TB, c *testClient) []int {
	t.Helper()
	out := c.must(t, "nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-i", "0,1,2,3")
	var used []int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		_, v, ok := strings.Cut(l, ", ")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("nvidia-smi line %q", l)
		}
		used = append(used, n)
	}
	return used
}

func healthCode(url string) int {
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestIncidentReplay replays the incident by hand over real SSH: with the orphans fault a stop
// leaves the scheduler workers holding GPU memory, the next start fails and Restart=always
// loops with NRestarts rising; killing the holders from the Proxmox node with host pids frees
// the memory after the lag, and a fresh start gets to /health 200.
func TestIncidentReplay(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Faults = []Fault{{Name: "orphans"}}
	opts.ReleaseLag = 300 * time.Second // 0.3 s real: long enough to observe, short enough to wait
	l := startLab(t, opts)
	svc := l.Topology().Services[0]
	gpu1, pve := dialHost(t, l, "gpu1"), dialHost(t, l, "pve")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	if code := healthCode(svc.URL); code != 200 {
		t.Fatalf("health after boot = %d", code)
	}
	for i, u := range gpuUsed(t, gpu1) {
		if u < 70000 {
			t.Fatalf("GPU %d holds %d MiB while serving, want the engine's memory", i, u)
		}
	}

	// Stop: the unit goes inactive, but the workers survive holding memory.
	gpu1.must(t, "systemctl", "stop", svc.Unit)
	if m := showMap(t, gpu1, svc.Unit, "ActiveState"); m["ActiveState"] != "inactive" {
		t.Fatalf("after stop: %v", m)
	}
	// qwen's GPUs only: the neighbour, coder, serves on GPUs 4-7 meanwhile.
	apps := pve.must(t, "nvidia-smi", "--query-compute-apps=pid,used_memory,gpu_uuid,process_name", "--format=csv,noheader,nounits", "-i", "0,1,2,3")
	lines := strings.Split(strings.TrimSpace(apps), "\n")
	if len(lines) != 4 {
		t.Fatalf("compute apps after stop with orphans: %q, want 4 holders", apps)
	}
	var hostPIDs []string
	for _, ln := range lines {
		f := strings.Split(ln, ", ")
		hostPIDs = append(hostPIDs, f[0])
		if !strings.HasPrefix(f[3], "sglang::schedul") {
			t.Fatalf("holder %q is not a scheduler worker", ln)
		}
	}
	ps := gpu1.must(t, "ps", "-eo", "pid=,ppid=,stat=,args=")
	if !strings.Contains(ps, "sglang::scheduler_TP0") {
		t.Fatalf("ps lacks orphaned worker:\n%s", ps)
	}
	for _, ln := range strings.Split(ps, "\n") {
		if strings.Contains(ln, "scheduler_TP") && strings.Fields(ln)[1] != "1" {
			t.Fatalf("orphan not reparented to pid 1: %q", ln)
		}
	}
	// As under systemd, the orphans stay in the unit's cgroup (seen from the node with the
	// container's prefix), and the stop's journal names them.
	if got := strings.Fields(pve.must(t, "ps", "-o", "cgroup=", "-p", strings.Join(hostPIDs, ","))); len(got) != 4 ||
		got[0] != "0::/lxc/129/ns/system.slice/"+svc.Unit {
		t.Fatalf("cgroups of the orphans seen from the node: %q, want the unit's", got)
	}
	if procs := strings.Fields(gpu1.must(t, "cat", "/sys/fs/cgroup/system.slice/"+svc.Unit+"/cgroup.procs")); len(procs) != 4 {
		t.Fatalf("the unit's cgroup.procs after the stop: %v, want the 4 orphans", procs)
	}
	if j := gpu1.must(t, "journalctl", "-u", svc.Unit, "-o", "cat"); strings.Count(j, "remains running after unit stopped.") != 4 {
		t.Fatalf("journal after the stop lacks the 4 left-over processes:\n%s", j)
	}
	// Host pids are not valid inside the container.
	if _, errs, code := gpu1.run(t, "kill", "-9", hostPIDs[0]); code != 1 || !strings.Contains(errs, "No such process") {
		t.Fatalf("kill host pid inside container: code %d stderr %q", code, errs)
	}

	// Start: the engine finds the memory taken and exits; Restart=always loops.
	gpu1.must(t, "systemctl", "start", svc.Unit)
	testkit.WaitFor(t, 10*time.Second, "restart loop with NRestarts >= 2", func() bool {
		m := showMap(t, gpu1, svc.Unit, "ActiveState", "SubState", "NRestarts")
		n, _ := strconv.Atoi(m["NRestarts"])
		return n >= 2
	})
	j := gpu1.must(t, "journalctl", "-u", svc.Unit, "-o", "cat", "--no-pager")
	if !strings.Contains(j, "Not enough memory. Please try to increase --mem-fraction-static.") {
		t.Fatalf("journal lacks the memory error:\n%s", j)
	}
	if !strings.Contains(j, "Scheduled restart job, restart counter is at 2.") {
		t.Fatalf("journal lacks the restart counter:\n%s", j)
	}
	if code := healthCode(svc.URL); code != 0 {
		t.Fatalf("health while looping = %d, want refused", code)
	}

	// Break the loop as the runbook does: stop, kill the holders from pve by host pid.
	gpu1.must(t, "systemctl", "stop", svc.Unit)
	pve.must(t, append([]string{"kill", "-9"}, hostPIDs...)...)
	if out := pve.must(t, "nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader", "-i", "0,1,2,3"); out != "" {
		t.Fatalf("holders still listed after kill: %q", out)
	}
	if used := gpuUsed(t, pve); used[0] == 0 {
		t.Fatalf("memory released at once, want it to stay for the lag: %v", used)
	}
	testkit.WaitFor(t, 5*time.Second, "GPUs clear", func() bool {
		for _, u := range gpuUsed(t, gpu1) {
			if u != 0 {
				return false
			}
		}
		return true
	})
	if k := l.Host("pve").KilledDaemons(); len(k) != 0 {
		t.Fatalf("daemons killed: %v", k)
	}

	// Start fresh: refused, then 503, then 200.
	gpu1.must(t, "systemctl", "start", svc.Unit)
	if m := showMap(t, gpu1, svc.Unit, "ActiveState", "SubState", "NRestarts"); m["ActiveState"] != "active" || m["NRestarts"] != "0" {
		t.Fatalf("after fresh start: %v", m)
	}
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	if code := healthCode(svc.URL); code != 200 {
		t.Fatalf("health after recovery = %d", code)
	}
	if j := gpu1.must(t, "journalctl", "-u", svc.Unit, "-n", "1", "-o", "cat"); !strings.Contains(j, "The server is fired up and ready to roll!") {
		t.Fatalf("last journal line %q", j)
	}
}
