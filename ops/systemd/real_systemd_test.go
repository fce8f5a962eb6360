package systemd_test

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/systemdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/systemd"
)

// These tests run against a real systemd 252 (internal/systemdtest), over SSH like any host.

// realHost boots systemd and returns the host of a pool that reaches it.
func realHost(t *testing.T) (*systemdtest.Host, *remote.Host) {
	t.Helper()
	sh := systemdtest.Start(t)
	p, err := remote.NewPool(remote.Config{Hosts: map[string]remote.HostConfig{"real": {Addr: sh.Addr, User: sh.User}},
		Signer: sh.ClientSigner, KnownHosts: sh.KnownHostsFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return sh, host(t, p, "real")
}

func write(t *testing.T, ctx context.Context, h *remote.Host, p, text string) {
	t.Helper()
	if err := h.WriteFileAtomic(ctx, p, []byte(text), 0o644); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

func sh(t *testing.T, ctx context.Context, h *remote.Host, argv ...string) string {
	t.Helper()
	out, err := h.Run(ctx, nil, argv...)
	if err != nil || out.ExitStatus != 0 {
		t.Fatalf("%v: %v, exit %d: %s", argv, err, out.ExitStatus, out.Stderr)
	}
	return string(out.Stdout)
}

// engineUnit is a service whose main process prints its settings and runs until stopped.
func engineUnit(steps string) string {
	return "[Unit]\nDescription=engine stand-in\n\n[Service]\nExecStart=/bin/sh -c 'echo engine up steps=" + steps +
		"; exec sleep infinity'\n"
}

// TestRealUnitEditDropInRollback reads a unit, edits it in place, deploys a drop-in and
// removes it again (the rollback to the previous text), with daemon-reload and
// NeedDaemonReload as systemd reports them, a start watched until it settles and the journal of
// each run.
func TestRealUnitEditDropInRollback(t *testing.T) {
	t.Parallel()
	_, h := realHost(t)
	ctx := testkit.Context(t, 60*time.Second)
	const name = "opsbot-engine.service"
	p := path.Join(systemdtest.UnitDir, name)
	svc := systemd.Service{R: h, Unit: name, Poll: 20 * time.Millisecond}

	if st, err := svc.Show(ctx); err != nil || st.Found() {
		t.Fatalf("show before the unit exists: %v %v, want not-found", st, err)
	}
	write(t, ctx, h, p, engineUnit("3"))
	if err := systemd.DaemonReload(ctx, h); err != nil {
		t.Fatal(err)
	}
	st, err := svc.Show(ctx)
	if err != nil || st.FragmentPath != p || st.NeedDaemonReload || st.LoadState != "loaded" || st.ActiveState != "inactive" {
		t.Fatalf("after daemon-reload: %+v %v", st, err)
	}
	if text, err := svc.Cat(ctx); err != nil || !strings.Contains(text, "# "+p+"\n") || !strings.Contains(text, "steps=3") {
		t.Fatalf("cat: %v %q", err, text)
	}
	start := func(want string) systemd.State {
		t.Helper()
		since := time.Now()
		if err := svc.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := svc.WatchStart(ctx, 0, 200*time.Millisecond)
		if err != nil || !st.Active() || st.SubState != "running" || st.MainPID == 0 {
			t.Fatalf("WatchStart: %v %v", st, err)
		}
		var lines []string
		testkit.WaitFor(t, 10*time.Second, "the journal to show "+want, func() bool {
			lines, err = svc.Journal(ctx, systemd.JournalQuery{Since: since.Add(-time.Second)})
			return err == nil && slices.Contains(lines, want)
		})
		return st
	}
	start("engine up steps=3")

	// In place: the file changes, systemd says so until the reload.
	write(t, ctx, h, p, engineUnit("4"))
	if st, err := svc.Show(ctx); err != nil || !st.NeedDaemonReload {
		t.Fatalf("after editing the unit: NeedDaemonReload %v (%v), want true", st.NeedDaemonReload, err)
	}
	if err := systemd.DaemonReload(ctx, h); err != nil {
		t.Fatal(err)
	}
	if st, err := svc.Show(ctx); err != nil || st.NeedDaemonReload {
		t.Fatalf("after daemon-reload: NeedDaemonReload %v (%v), want false", st.NeedDaemonReload, err)
	}
	start("engine up steps=4")

	// As a drop-in: an empty ExecStart= clears the unit's, the next one replaces it.
	dropIn := p + ".d/opsbot.conf"
	sh(t, ctx, h, "mkdir", "-p", path.Dir(dropIn))
	write(t, ctx, h, dropIn, "[Service]\nExecStart=\nExecStart=/bin/sh -c 'echo engine up steps=10; exec sleep infinity'\n")
	// systemd 252 does not flag a new drop-in (NeedDaemonReload stays no; it does flag a changed
	// or removed one): the writer must reload, as ops does after every write.
	if st, err := svc.Show(ctx); err != nil || len(st.DropInPaths) != 0 {
		t.Fatalf("a drop-in seen before daemon-reload: %q %v", st.DropInPaths, err)
	}
	if err := systemd.DaemonReload(ctx, h); err != nil {
		t.Fatal(err)
	}
	st, err = svc.Show(ctx)
	if err != nil || !slices.Equal(st.DropInPaths, []string{dropIn}) || st.NeedDaemonReload {
		t.Fatalf("DropInPaths %q NeedDaemonReload %v (%v), want [%s] false", st.DropInPaths, st.NeedDaemonReload, err, dropIn)
	}
	if text, err := svc.Cat(ctx); err != nil || !strings.Contains(text, "# "+dropIn+"\n") {
		t.Fatalf("cat lists the drop-in: %v %q", err, text)
	}
	start("engine up steps=10")

	// Rollback: the drop-in goes, the previous text is what runs.
	sh(t, ctx, h, "rm", "-f", dropIn)
	if st, err := svc.Show(ctx); err != nil || !st.NeedDaemonReload {
		t.Fatalf("after removing the drop-in: NeedDaemonReload %v (%v), want true", st.NeedDaemonReload, err)
	}
	if err := systemd.DaemonReload(ctx, h); err != nil {
		t.Fatal(err)
	}
	if st, err := svc.Show(ctx); err != nil || len(st.DropInPaths) != 0 {
		t.Fatalf("after removing the drop-in: %q %v", st.DropInPaths, err)
	}
	start("engine up steps=4")

	// Rollback of the in-place edit: the previous text back, atomically, and reloaded.
	write(t, ctx, h, p, engineUnit("3"))
	if st, err := svc.Show(ctx); err != nil || !st.NeedDaemonReload {
		t.Fatalf("after restoring the unit: NeedDaemonReload %v (%v), want true", st.NeedDaemonReload, err)
	}
	if err := systemd.DaemonReload(ctx, h); err != nil {
		t.Fatal(err)
	}
	start("engine up steps=3")
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := svc.WaitStopped(ctx); err != nil || st.ActiveState != "inactive" || st.MainPID != 0 {
		t.Fatalf("after stop: %v %v", st, err)
	}
}

// TestRealRestartLoop: Restart=always with a failing ExecStart is a real loop (activating,
// auto-restart, NRestarts rising) that WatchStart reports and Diagnose explains from the
// journal; a stop ends it for good. A unit that keeps failing within its start limit ends
// failed with start-limit-hit; Start is refused until reset-failed.
func TestRealRestartLoop(t *testing.T) {
	t.Parallel()
	_, h := realHost(t)
	ctx := testkit.Context(t, 60*time.Second)
	write(t, ctx, h, systemdtest.UnitDir+"/loop.service", "[Unit]\nStartLimitIntervalSec=0\n\n[Service]\n"+
		"ExecStart=/bin/sh -c 'echo \"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\"; exit 1'\n"+
		"Restart=always\nRestartSec=300ms\n")
	write(t, ctx, h, systemdtest.UnitDir+"/flappy.service", "[Unit]\nStartLimitBurst=3\nStartLimitIntervalSec=600\n\n"+
		"[Service]\nExecStart=/bin/false\nRestart=always\nRestartSec=50ms\n")
	if err := systemd.DaemonReload(ctx, h); err != nil {
		t.Fatal(err)
	}
	loop := systemd.Service{R: h, Unit: "loop.service", Poll: 10 * time.Millisecond}
	since := time.Now()
	if err := loop.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := loop.WatchStart(ctx, 0, 5*time.Second)
	var le *systemd.LoopError
	if !errors.As(err, &le) || le.Restarts < 1 {
		t.Fatalf("WatchStart: %v, want *LoopError", err)
	}
	first, err := loop.WaitFor(ctx, "auto-restart", systemd.State.AutoRestarting)
	if err != nil || first.ActiveState != "activating" || first.SubState != "auto-restart" || first.Result != "exit-code" ||
		first.MainExit() != "exited with status 1" {
		t.Fatalf("in the loop: %+v %v", first, err)
	}
	later, err := loop.WaitFor(ctx, "restarted again", func(s systemd.State) bool { return s.NRestarts > first.NRestarts })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loop: %v, then %v", first, later)
	lines, err := loop.Journal(ctx, systemd.JournalQuery{Since: since.Add(-time.Second), Lines: 200})
	if err != nil {
		t.Fatal(err)
	}
	if d := systemd.Diagnose(lines); d.Cause != systemd.CauseGPUMemoryHeld {
		t.Fatalf("Diagnose = %+v over\n%s", d, strings.Join(lines, "\n"))
	}
	if !slices.Contains(lines, "loop.service: Scheduled restart job, restart counter is at 1.") {
		t.Errorf("journal lacks systemd's restart line:\n%s", strings.Join(lines, "\n"))
	}
	if err := loop.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped, err := loop.WaitStopped(ctx)
	if err != nil || stopped.ActiveState != "inactive" {
		t.Fatalf("after stop: %v %v", stopped, err)
	}
	// Stopped for good: no restart for several RestartSec.
	quiet, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if st, err := loop.WaitFor(quiet, "restarting", func(s systemd.State) bool { return !s.Stopped() }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after stop the loop went on: %v %v", st, err)
	}

	checkStartLimit(t, ctx, h)
}

// checkStartLimit starts flappy.service, a unit that keeps failing with StartLimitBurst=3 (its
// file is written and loaded by the caller), and checks what systemd 252 does at the limit: the
// unit is failed with its failure's result (exit-code; start-limit-hit only replaces a success),
// the journal says "Start request repeated too quickly.", a start is refused (ErrJobFailed: "the
// control process exited with error code") until reset-failed. Unknown units are
// ErrUnitNotFound.
func checkStartLimit(t *testing.T, ctx context.Context, r systemd.Runner) {
	t.Helper()
	flappy := systemd.Service{R: r, Unit: "flappy.service", Poll: 10 * time.Millisecond}
	if err := flappy.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := flappy.WaitFor(ctx, "failed", func(s systemd.State) bool { return s.ActiveState == "failed" })
	if err != nil || st.NRestarts != 3 || st.Result != "exit-code" || st.SubState != "failed" {
		t.Fatalf("at the start limit: %v %v, want failed (failed), NRestarts 3, result exit-code", st, err)
	}
	testkit.WaitFor(t, 10*time.Second, "the start limit in the journal", func() bool {
		lines, err := flappy.Journal(ctx, systemd.JournalQuery{})
		return err == nil && slices.Contains(lines, "flappy.service: Start request repeated too quickly.")
	})
	if err := flappy.Start(ctx); !errors.Is(err, systemd.ErrJobFailed) {
		t.Fatalf("start after the limit: %v, want ErrJobFailed", err)
	}
	if err := flappy.ResetFailed(ctx); err != nil {
		t.Fatal(err)
	}
	if err := flappy.Start(ctx); err != nil {
		t.Fatalf("start after reset-failed: %v", err)
	}
	if err := flappy.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	missing := systemd.Service{R: r, Unit: "nope.service"}
	if _, err := missing.Cat(ctx); !errors.Is(err, systemd.ErrUnitNotFound) {
		t.Fatalf("cat of a missing unit: %v", err)
	}
	if err := missing.Start(ctx); !errors.Is(err, systemd.ErrUnitNotFound) {
		t.Fatalf("start of a missing unit: %v", err)
	}
}
