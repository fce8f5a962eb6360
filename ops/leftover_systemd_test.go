package ops_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/systemdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/systemd"
)

// These tests run the pipelines against a real systemd 252 (internal/systemdtest), over SSH.
// The machine has no GPU: a stand-in nvidia-smi (a shell script, the one mock here) reports
// each live process whose command line starts with "sglang::" as holding 1000 MiB of GPU 0, so
// that what ops does with the processes themselves (find them by cgroup and PPID, signal
// them, wait until they are gone) runs for real.

const fakeSMI = `#!/bin/sh
# Stand-in for nvidia-smi on a machine without a GPU: each live process whose command line
# starts with "sglang::" holds 1000 MiB of GPU 0.
pids=$(pgrep -f '^sglang::')
uuid=GPU-3f2a7c10-5c1e-4b7a-9d3f-a1b2c3d40000
case "$1" in
--query-gpu=*)
	used=0
	for p in $pids; do used=$((used + 1000)); done
	echo "0, $used, 81559, $uuid" ;;
--query-compute-apps=*)
	for p in $pids; do echo "$p, 1000, $uuid"; done ;;
*)
	echo "nvidia-smi stand-in: unsupported $*" >&2; exit 2 ;;
esac
`

// engineUnit runs a main process that stops on SIGTERM and a worker ("sglang::scheduler_TP0")
// that ignores it; with KillMode=process a stop leaves the worker running.
const engineUnit = `[Unit]
Description=engine stand-in with a worker that ignores SIGTERM

[Service]
KillMode=process
ExecStart=/bin/bash -c 'echo engine up; (trap "" TERM; exec -a sglang::scheduler_TP0 sleep infinity) & exec -a sglang.launch_server sleep infinity'
`

const loopUnit = `[Unit]
StartLimitIntervalSec=0

[Service]
ExecStart=/bin/sh -c 'echo "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."; exit 1'
Restart=always
RestartSec=200ms
`

// realRunbook boots systemd with the stand-in nvidia-smi on PATH and the units, and returns a
// runbook whose services "engine" (engineUnit) and "looper" (loopUnit) live there.
func realRunbook(t *testing.T) (*systemdtest.Host, *ops.Runbook, *remote.Host) {
	t.Helper()
	h := systemdtest.Start(t)
	bin := filepath.Join(h.Dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(fakeSMI), 0o755); err != nil {
		t.Fatal(err)
	}
	// Inside the namespace only (its mounts are private).
	if out, err := h.Run("mount --bind " + systemdtest.MountDir + "/bin /usr/local/bin"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	cfg := ops.Config{KeyFile: h.ClientKeyFile, KnownHosts: h.KnownHostsFile,
		Hosts: map[string]ops.HostConfig{"real": {Addr: h.Addr, User: h.User}},
		Services: map[string]ops.ServiceConfig{
			"engine": {Host: "real", Unit: "opsbot-engine.service", URL: "http://127.0.0.1:1", Engine: "sglang", GPUs: []int{0},
				ClearMiB: 500, ReadyTimeout: 5 * time.Second},
			"looper": {Host: "real", Unit: "opsbot-looper.service", URL: "http://127.0.0.1:1", Engine: "sglang", GPUs: []int{0},
				ClearMiB: 500, ReadyTimeout: 5 * time.Second},
		},
		ReapGrace: 300 * time.Millisecond, Poll: 20 * time.Millisecond, SettleTime: 200 * time.Millisecond,
		StopTimeout: 20 * time.Second, ClearTimeout: 20 * time.Second}
	rb, err := ops.New(cfg)
	if err != nil {
		t.Fatalf("ops.New: %v", err)
	}
	t.Cleanup(func() { rb.Close() })
	p, err := remote.NewPool(remote.Config{Hosts: map[string]remote.HostConfig{"real": {Addr: h.Addr, User: h.User}},
		Signer: h.ClientSigner, KnownHosts: h.KnownHostsFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rh, err := p.Host("real")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 60*time.Second)
	for name, text := range map[string]string{"opsbot-engine.service": engineUnit, "opsbot-looper.service": loopUnit} {
		if err := rh.WriteFileAtomic(ctx, systemdtest.UnitDir+"/"+name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := systemd.DaemonReload(ctx, rh); err != nil {
		t.Fatal(err)
	}
	return h, rb, rh
}

// TestRealKillModeProcessLeftoverReaped: the incident's cause on a real systemd. A
// KillMode=process unit whose worker ignores SIGTERM is stopped with `svc stop`: systemd leaves
// the worker running, in the unit's cgroup (/system.slice/UNIT) with PPID 1, and the stop
// reports the memory it still holds. The bot finds the worker by its cgroup and PPID and
// `gpu recover --no-start` reaps it (SIGKILL after SIGTERM was ignored); then nothing holds
// GPU memory. `svc status` and `svc logs` read the real state and journal on the way.
func TestRealKillModeProcessLeftoverReaped(t *testing.T) {
	t.Parallel()
	_, rb, rh := realRunbook(t)
	ctx := testkit.Context(t, 60*time.Second)
	svc := systemd.Service{R: rh, Unit: "opsbot-engine.service", Poll: 20 * time.Millisecond}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := svc.WatchStart(ctx, 0, 200*time.Millisecond); err != nil {
		t.Fatalf("start: %v %v", st, err)
	}
	ev := &events{}
	res, err := rb.ServiceStatus(ctx, "engine", ev)
	if err != nil || res.Service == nil || res.Service.ActiveState != "active" || res.Service.SubState != "running" ||
		res.Service.MainPID == 0 || res.HasIncident(ops.IncidentRestartLoop) {
		t.Fatalf("svc status: %+v %v", res, err)
	}
	t.Logf("svc status: %s", res.Summary)

	res, err = rb.ServiceAction(ctx, "engine", "stop", false, ev)
	if err != nil || !res.HasIncident(ops.IncidentGPUMemoryHeld) {
		t.Fatalf("svc stop: %+v %v\n%s", res, err, ev.text())
	}
	if !strings.Contains(ev.text(), "gpu recover engine") {
		t.Errorf("svc stop does not point to gpu recover:\n%s", ev.text())
	}
	holders, err := gpu.Holders(ctx, rh)
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) != 1 {
		t.Fatalf("holders after the stop: %+v, want the worker only", holders)
	}
	w := holders[0]
	if w.Cgroup != "/system.slice/opsbot-engine.service" || w.PPID != 1 || !w.Engine ||
		!strings.HasPrefix(w.Cmdline, "sglang::scheduler_TP0") || w.UsedMiB != 1000 {
		t.Fatalf("left-over worker %+v, want cgroup /system.slice/opsbot-engine.service, PPID 1, an engine holding 1000 MiB", w)
	}

	res, err = rb.ServiceLogs(ctx, "engine", 20, ev)
	if err != nil {
		t.Fatal(err)
	}
	remains := "opsbot-engine.service: Unit process " + strconv.Itoa(w.PID) + " (sleep) remains running after unit stopped."
	if !slices.Contains(res.Logs, "engine up") || !slices.Contains(res.Logs, remains) {
		t.Fatalf("svc logs lacks the engine's line or systemd's %q:\n%s", remains, strings.Join(res.Logs, "\n"))
	}

	res, err = rb.GPURecover(ctx, "engine", ops.RecoverOptions{NoStart: true}, ev)
	if err != nil {
		t.Fatalf("gpu recover: %v\n%s", err, ev.text())
	}
	if len(res.Killed) != 1 || res.Killed[0].PID != w.PID || res.Killed[0].Signal != "KILL" {
		t.Fatalf("gpu recover killed %+v, want PID %d with KILL (it ignores TERM)\n%s", res.Killed, w.PID, ev.text())
	}
	out, err := rh.Run(ctx, nil, "ps", "-o", "pid=", "-p", strconv.Itoa(w.PID))
	if err != nil || out.ExitStatus != 1 {
		t.Fatalf("worker %d still there after gpu recover: %q %v", w.PID, out.Stdout, err)
	}
	if hs, err := gpu.Holders(ctx, rh); err != nil || len(hs) != 0 {
		t.Fatalf("holders after gpu recover: %+v %v", hs, err)
	}
	t.Logf("gpu recover: %s", res.Summary)
}

// TestRealStatusAndLogsOfALoop: `svc status` on a real restart loop names it (restart_loop)
// and points to svc logs; `svc logs` shows the journal's lines with the known cause.
func TestRealStatusAndLogsOfALoop(t *testing.T) {
	t.Parallel()
	_, rb, rh := realRunbook(t)
	ctx := testkit.Context(t, 60*time.Second)
	svc := systemd.Service{R: rh, Unit: "opsbot-looper.service", Poll: 20 * time.Millisecond}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WaitFor(ctx, "restarted", func(s systemd.State) bool { return s.NRestarts >= 2 }); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	res, err := rb.ServiceStatus(ctx, "looper", ev)
	if err != nil || !res.HasIncident(ops.IncidentRestartLoop) || !strings.Contains(strings.Join(res.Details, "\n"), "svc logs looper") {
		t.Fatalf("svc status of a loop: %+v %v", res, err)
	}
	t.Logf("svc status: %s", res.Summary)
	res, err = rb.ServiceLogs(ctx, "looper", 30, ev)
	if err != nil || !strings.Contains(strings.Join(res.Details, "\n"), "gpu_memory_held") ||
		!slices.Contains(res.Logs, "opsbot-looper.service: Main process exited, code=exited, status=1/FAILURE") {
		t.Fatalf("svc logs of a loop: %+v %v", res, err)
	}
	stopped, err := rb.ServiceAction(ctx, "looper", "stop", false, ev)
	if err != nil || !stopped.HasIncident(ops.IncidentRestartLoop) {
		t.Fatalf("svc stop of a loop: %+v %v\n%s", stopped, err, ev.text())
	}
	if st, err := svc.Show(ctx); err != nil || !st.Stopped() {
		t.Fatalf("after svc stop: %v %v", st, err)
	}
}
