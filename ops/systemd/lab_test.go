package systemd_test

import (
	"context"
	"errors"
	"github.com/opsbot/opsbot/internal/testkit"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/systemd"
)

const unit = "sglang-qwen.service"

// labPool starts a lab and a pool with its hosts, plus "gpu1-via-pve": the
// container reached through the node with `pct exec 129 --`.
func labPool(t testing.TB, opts lab.Options) (*lab.Lab, *remote.Pool) {
	t.Helper()
	l := labtest.Start(t, opts)
	var pve lab.HostInfo
	for _, h := range l.Topology().Hosts {
		if h.Name == "pve" {
			pve = h
		}
	}
	return l, labtest.Pool(t, l, remote.HostConfig{Name: "gpu1-via-pve", Addr: pve.Addr, User: pve.User,
		Prefix: []string{"pct", "exec", "129", "--"}})
}

func host(t testing.TB, p *remote.Pool, name string) *remote.Host {
	t.Helper()
	h, err := p.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestLabRestartLoopDiagnosed replays the incident: with the orphans fault a
// stop leaves the workers holding GPU memory, so the next start loops.
// WatchStart reports a *LoopError, and Diagnose on the journal since the start
// names gpu_memory_held with SGLang's line.
func TestLabRestartLoopDiagnosed(t *testing.T) {
	t.Parallel()
	l, pool := labPool(t, lab.Options{Faults: []lab.Fault{{Name: "orphans"}}, TimeScale: 50, LoadTime: 5 * time.Second})
	svc := systemd.Service{R: host(t, pool, "gpu1"), Unit: unit, Poll: 25 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := svc.WaitStopped(ctx); err != nil || st.ActiveState != "inactive" {
		t.Fatalf("after stop: %v %v", st, err)
	}
	since := time.Now()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s0, err := svc.Show(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := svc.WatchStart(ctx, s0.NRestarts, 5*time.Second)
	var le *systemd.LoopError
	if !errors.As(err, &le) || le.Restarts < 1 || le.Unit != unit {
		t.Fatalf("WatchStart: %v (state %v), want *LoopError", err, st)
	}
	if !strings.Contains(err.Error(), "restart loop") {
		t.Fatalf("message %q", err)
	}
	lines, err := svc.Journal(ctx, systemd.JournalQuery{Since: since.Add(-time.Second), Lines: 500})
	if err != nil {
		t.Fatal(err)
	}
	d := systemd.Diagnose(lines)
	if d.Cause != systemd.CauseGPUMemoryHeld || d.Line != "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." {
		t.Fatalf("Diagnose = %+v over\n%s", d, strings.Join(lines, "\n"))
	}
	// Stopping ends the loop.
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WaitStopped(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLabStartSettles: a clean restart is active and stays so; Show works the
// same through the Proxmox node with the pct prefix; Cat and a bounded Journal
// read the unit.
func TestLabStartSettles(t *testing.T) {
	t.Parallel()
	l, pool := labPool(t, lab.Options{TimeScale: 1000})
	svc := systemd.Service{R: host(t, pool, "gpu1"), Unit: unit, Poll: 25 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Stop, wait until the driver released the engine's GPU memory, then
	// start: a restart straight away may start the engine while the driver
	// still holds the old one's memory (the lab models that release, as the
	// incident shows), and one crash of that is a restart loop here.
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Released: every GPU's memory is what live processes hold (the node
	// sees every container's), none is left to the driver.
	gpus, node := l.Host("gpu1"), l.Host("pve")
	testkit.WaitFor(t, 20*time.Second, "the driver to release the stopped engine's GPU memory", func() bool {
		held := map[int]int{}
		for _, p := range node.Processes() {
			for g, mib := range p.GPUMiB {
				held[g] += mib
			}
		}
		for _, g := range gpus.GPUs() {
			if g.UsedMiB != held[g.Index] {
				return false
			}
		}
		return true
	})
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st, err := svc.WatchStart(ctx, 0, 200*time.Millisecond)
	if err != nil || !st.Active() || st.MainPID == 0 {
		t.Fatalf("WatchStart: %v %v", st, err)
	}
	if time.Since(start) < 200*time.Millisecond {
		t.Fatal("WatchStart returned before the settle time")
	}
	via, err := systemd.Service{R: host(t, pool, "gpu1-via-pve"), Unit: unit}.Show(ctx)
	if err != nil || via.MainPID != st.MainPID || via.ID != unit {
		t.Fatalf("show via pct: %v %v, want main PID %d", via, err, st.MainPID)
	}
	text, err := svc.Cat(ctx)
	if err != nil || !strings.Contains(text, "sglang.launch_server") {
		t.Fatalf("cat: %v %q", err, text)
	}
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	lines, err := svc.Journal(ctx, systemd.JournalQuery{Lines: 1})
	if err != nil || len(lines) != 1 || !strings.Contains(lines[0], "ready to roll") {
		t.Fatalf("last journal line: %q %v", lines, err)
	}
}

// TestLabFailedAndStartLimit: a unit that exits at once without Restart ends
// in *FailedError; one that keeps failing hits the start limit and stays failed
// with its failure's result (exit-code, as systemd 252 reports it), after which
// Start is refused (ErrJobFailed) until ResetFailed.
func TestLabFailedAndStartLimit(t *testing.T) {
	t.Parallel()
	l, pool := labPool(t, lab.Options{TimeScale: 1000})
	gpu1 := host(t, pool, "gpu1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := l.Host("gpu1")
	if err := h.WriteFile("/etc/systemd/system/once.service", []byte("[Service]\nExecStart=/bin/false\n")); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile("/etc/systemd/system/flappy.service", []byte("[Unit]\nStartLimitBurst=3\nStartLimitIntervalSec=600\n[Service]\nExecStart=/bin/false\nRestart=always\nRestartSec=1\n")); err != nil {
		t.Fatal(err)
	}
	if err := systemd.DaemonReload(ctx, gpu1); err != nil {
		t.Fatal(err)
	}
	once := systemd.Service{R: gpu1, Unit: "once.service", Poll: 10 * time.Millisecond}
	if err := once.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := once.WatchStart(ctx, 0, time.Second)
	var fe *systemd.FailedError
	if !errors.As(err, &fe) || fe.State.ActiveState != "failed" || fe.State.MainExit() != "exited with status 1" {
		t.Fatalf("once: %v, want *FailedError with exit status 1", err)
	}

	checkStartLimit(t, ctx, gpu1)
	missing := systemd.Service{R: gpu1, Unit: "nope.service"}
	if st, err := missing.Show(ctx); err != nil || st.Found() {
		t.Fatalf("show of a missing unit: %v %v", st, err)
	}
}
