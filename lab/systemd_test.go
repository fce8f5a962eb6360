package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/internal/testkit"
)

const qwenUnit = "sglang-qwen.service"

func readyLab(t *testing.T, opts Options) *Lab {
	t.Helper()
	l := startLab(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Every service, not only qwen: tests read the whole node (nvidia-smi lists coder's
	// workers too), and a busy machine may still have coder loading when qwen serves.
	for _, s := range l.Topology().Services {
		if err := l.WaitReady(ctx, s.Name); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestStartLimitBurstEndsInFailed(t *testing.T) {
	t.Parallel()
	l := startLab(t, fastOpts())
	h := l.Host("gpu1")
	unit := "[Unit]\nDescription=flappy\nStartLimitBurst=3\nStartLimitIntervalSec=600\n[Service]\nExecStart=/bin/false\nRestart=always\nRestartSec=1\n"
	if err := h.WriteFile("/etc/systemd/system/flappy.service", []byte(unit)); err != nil {
		t.Fatal(err)
	}
	c := dialHost(t, l, "gpu1")
	c.must(t, "systemctl", "daemon-reload")
	c.must(t, "systemctl", "start", "flappy")
	// As systemd 252: the failure's result stays (start-limit-hit replaces only success).
	testkit.WaitFor(t, 5*time.Second, "failed at the start limit", func() bool {
		m := showMap(t, c, "flappy.service", "ActiveState", "Result")
		return m["ActiveState"] == "failed" && m["Result"] == "exit-code"
	})
	m := showMap(t, c, "flappy.service", "NRestarts", "ExecMainStatus", "ExecMainCode")
	if m["NRestarts"] != "3" || m["ExecMainStatus"] != "1" || m["ExecMainCode"] != "1" {
		t.Fatalf("after the start limit: %v, want NRestarts=3 (the 4th start refused), status 1 exited", m)
	}
	_, errs, code := c.run(t, "systemctl", "start", "flappy.service")
	if code != 1 || !strings.Contains(errs, "Job for flappy.service failed because the control process exited with error code.") {
		t.Fatalf("start after limit: code %d stderr %q", code, errs)
	}
	c.must(t, "systemctl", "reset-failed", "flappy.service")
	if m := showMap(t, c, "flappy.service", "ActiveState", "Result"); m["ActiveState"] != "inactive" || m["Result"] != "success" {
		t.Fatalf("after reset-failed: %v", m)
	}
	c.must(t, "systemctl", "start", "flappy.service")
	if j := strings.Join(h.Journal("flappy.service"), "\n"); !strings.Contains(j, "flappy.service: Start request repeated too quickly.") {
		t.Fatalf("journal:\n%s", j)
	}
}

func TestDaemonReloadAndDropIn(t *testing.T) {
	t.Parallel()
	l := readyLab(t, fastOpts())
	c := dialHost(t, l, "gpu1")
	sc, err := sftp.NewClient(c.c)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	d := "/etc/systemd/system/" + qwenUnit + ".d"
	if err := sc.MkdirAll(d); err != nil {
		t.Fatal(err)
	}
	dropIn := "[Service]\nExecStart=\nExecStart=/opt/sglang/.venv/bin/python3 -m sglang.launch_server --model-path /models/Qwen3.5-122B-A10B \\\n  --served-model-name qwen --tp 4 --port 30000 --speculative-algo NEXTN --speculative-num-steps 10 \\\n  --speculative-eagle-topk 1 --speculative-num-draft-tokens 11\n"
	writeAtomic(t, sc, d+"/opsbot.conf", dropIn)
	// systemd 252 does not notice a drop-in added since the last reload: no flag, no warning.
	if m := showMap(t, c, qwenUnit, "NeedDaemonReload", "DropInPaths"); m["NeedDaemonReload"] != "no" || m["DropInPaths"] != "" {
		t.Fatalf("after writing a drop-in: %v", m)
	}
	_, errs, code := c.run(t, "systemctl", "restart", qwenUnit)
	if code != 0 || errs != "" {
		t.Fatalf("restart without reload: code %d stderr %q", code, errs)
	}
	if ps := c.must(t, "ps", "-eo", "args="); !strings.Contains(ps, "--speculative-num-steps 3 ") {
		t.Fatalf("restart without daemon-reload must keep the loaded text:\n%s", ps)
	}
	c.must(t, "systemctl", "daemon-reload")
	if m := showMap(t, c, qwenUnit, "NeedDaemonReload", "DropInPaths"); m["NeedDaemonReload"] != "no" || m["DropInPaths"] != d+"/opsbot.conf" {
		t.Fatalf("after daemon-reload: %v", m)
	}
	_, errs, _ = c.run(t, "systemctl", "restart", qwenUnit)
	if errs != "" {
		t.Fatalf("restart after reload warned: %q", errs)
	}
	if ps := c.must(t, "ps", "-eo", "args="); !strings.Contains(ps, "--speculative-num-steps 10 ") {
		t.Fatalf("drop-in ExecStart not used:\n%s", ps)
	}
	cat := c.must(t, "systemctl", "cat", qwenUnit)
	if !strings.HasPrefix(cat, "# /etc/systemd/system/"+qwenUnit+"\n[Unit]") || !strings.Contains(cat, "\n# "+d+"/opsbot.conf\n[Service]\nExecStart=\n") {
		t.Fatalf("systemctl cat:\n%s", cat)
	}
}

// writeAtomic writes as the ops layer does: a temp file, then PosixRename over the target.
func writeAtomic(t *testing.T, sc *sftp.Client, path, text string) {
	t.Helper()
	tmp := path + ".tmp-opsbot"
	f, err := sc.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		t.Fatalf("open %s: %v", tmp, err)
	}
	if _, err := io.WriteString(f, text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sc.PosixRename(tmp, path); err != nil {
		t.Fatalf("posix-rename %s: %v", path, err)
	}
}

func TestSFTPAtomicWrite(t *testing.T) {
	t.Parallel()
	l := startLab(t, fastOpts())
	c := dialHost(t, l, "gpu1")
	sc, err := sftp.NewClient(c.c)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	p := "/etc/systemd/system/" + qwenUnit
	orig, err := l.Host("gpu1").ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	next := strings.Replace(string(orig), "--speculative-num-steps 3", "--speculative-num-steps 5", 1)
	writeAtomic(t, sc, p, next)
	if got := c.must(t, "cat", p); got != next {
		t.Fatalf("cat after atomic write differs")
	}
	if _, _, code := c.run(t, "test", "-e", p+".tmp-opsbot"); code != 1 {
		t.Fatalf("temp file left behind")
	}
	if err := sc.Rename(p, "/etc/hostname"); err == nil {
		t.Fatal("plain SFTP rename over an existing file must fail")
	}
	if _, err := sc.Stat("/etc/nope"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat missing: %v, want ErrNotExist", err)
	}
	if m := showMap(t, c, qwenUnit, "NeedDaemonReload"); m["NeedDaemonReload"] != "yes" {
		t.Fatalf("systemd did not notice the sftp write: %v", m)
	}
}

func TestPctExec(t *testing.T) {
	t.Parallel()
	l := readyLab(t, fastOpts())
	pve, gpu1 := dialHost(t, l, "pve"), dialHost(t, l, "gpu1")
	if out := pve.must(t, "pct", "exec", "129", "--", "systemctl", "is-active", qwenUnit); out != "active\n" {
		t.Fatalf("pct exec is-active: %q", out)
	}
	if _, _, code := pve.run(t, "pct", "exec", "129", "--", "exit", "7"); code != 7 {
		t.Fatalf("pct exec exit status %d, want 7", code)
	}
	if out := pve.must(t, "pct", "exec", "130", "--", "systemctl", "is-active", "sglang-coder.service"); out != "active\n" {
		t.Fatalf("pct exec 130 is-active sglang-coder.service: %q", out)
	}
	if _, _, code := pve.run(t, "pct", "exec", "130", "--", "systemctl", "cat", qwenUnit); code == 0 {
		t.Fatalf("container 130 has qwen's unit: containers must not share their units")
	}
	_, errs, code := pve.run(t, "pct", "exec", "131", "--", "true")
	if code != 255 || !strings.Contains(errs, "Configuration file 'nodes/pve/lxc/131.conf' does not exist") {
		t.Fatalf("unknown container: code %d stderr %q", code, errs)
	}
	// Inside the container pids are container pids; on the node they are host pids.
	ctPS := pve.must(t, "pct", "exec", "129", "--", "ps", "-o", "pid=", "-p", "1")
	if strings.TrimSpace(ctPS) != "1" {
		t.Fatalf("container init pid %q", ctPS)
	}
	if _, _, code := gpu1.run(t, "pct", "list"); code != 127 {
		t.Fatalf("pct inside the container: exit %d, want 127", code)
	}
	main := l.Host("gpu1").Unit(qwenUnit).MainPID
	var hostPID int
	for _, p := range l.Host("pve").Processes() {
		if len(p.Args) > 2 && p.Args[2] == "sglang.launch_server" && strings.HasPrefix(p.Cgroup, "/lxc/129/") {
			hostPID = p.HostPID
		}
	}
	if hostPID == 0 || hostPID == main {
		t.Fatalf("main pid %d, host pid %d: want distinct pids", main, hostPID)
	}
	if cg := pve.must(t, "cat", "/proc/"+itoa(hostPID)+"/cgroup"); cg != "0::/lxc/129/ns/system.slice/"+qwenUnit+"\n" {
		t.Fatalf("host view of the cgroup: %q", cg)
	}
	if cg := gpu1.must(t, "cat", "/proc/"+itoa(main)+"/cgroup"); cg != "0::/system.slice/"+qwenUnit+"\n" {
		t.Fatalf("container view of the cgroup: %q", cg)
	}
	if cmd := gpu1.must(t, "cat", "/proc/"+itoa(main)+"/cmdline"); !strings.HasPrefix(cmd, "/opt/sglang/.venv/bin/python3\x00-m\x00sglang.launch_server\x00") {
		t.Fatalf("cmdline %q", cmd)
	}
}

func TestDStateWorkerSurvivesKill(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Faults = []Fault{{Name: "dstate"}}
	l := readyLab(t, opts)
	gpu1, pve := dialHost(t, l, "gpu1"), dialHost(t, l, "pve")
	gpu1.must(t, "systemctl", "stop", qwenUnit)
	if m := showMap(t, gpu1, qwenUnit, "ActiveState", "Result"); m["ActiveState"] != "failed" || m["Result"] != "timeout" {
		t.Fatalf("stop with an unkillable worker: %v, want failed/timeout", m)
	}
	var d ProcInfo
	for _, p := range l.Host("pve").Processes() {
		if p.State == "D" {
			d = p
		}
	}
	if d.HostPID == 0 || d.Args[0] != "sglang::scheduler_TP0" {
		t.Fatalf("no D-state scheduler_TP0 after stop: %+v", l.Host("pve").Processes())
	}
	pve.must(t, "kill", "-9", itoa(d.HostPID))
	st := pve.must(t, "cat", "/proc/"+itoa(d.HostPID)+"/status")
	if !strings.Contains(st, "State:\tD (disk sleep)\n") {
		t.Fatalf("status after kill -9:\n%s", st)
	}
	used := gpuUsed(t, pve)
	testkit.WaitFor(t, 5*time.Second, "other GPUs released", func() bool {
		used = gpuUsed(t, pve)
		return used[1] == 0 && used[2] == 0 && used[3] == 0
	})
	if used[0] < 70000 {
		t.Fatalf("GPU 0 released memory of a D-state holder: %v", used)
	}
	if j := strings.Join(l.Host("gpu1").Journal(qwenUnit), "\n"); !strings.Contains(j, "Processes still around after final SIGKILL. Entering failed mode.") {
		t.Fatalf("journal:\n%s", j)
	}
}

func TestKillModeProcessLeavesWorkers(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.UnitText = strings.Replace(defaultUnit("sglang"), "Restart=always\n", "Restart=always\nKillMode=process\n", 1)
	l := readyLab(t, opts)
	c := dialHost(t, l, "gpu1")
	c.must(t, "systemctl", "stop", qwenUnit)
	procs := c.must(t, "cat", "/sys/fs/cgroup/system.slice/"+qwenUnit+"/cgroup.procs")
	if n := len(strings.Fields(procs)); n != 4 {
		t.Fatalf("cgroup after stop with KillMode=process: %q, want the 4 schedulers", procs)
	}
	if used := gpuUsed(t, c); used[0] < 70000 {
		t.Fatalf("memory released although the workers live: %v", used)
	}
	if m := showMap(t, c, qwenUnit, "ActiveState", "KillMode"); m["ActiveState"] != "inactive" || m["KillMode"] != "process" {
		t.Fatalf("%v", m)
	}
}

func TestSSHDropFault(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Faults = []Fault{{Name: "ssh-drop"}}
	l := readyLab(t, opts)
	c := dialHost(t, l, "gpu1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, _, err := c.Run(ctx, nil, "systemctl", "stop", qwenUnit); err == nil {
		t.Fatal("systemctl stop with ssh-drop: no transport error")
	}
	c2 := dialHost(t, l, "gpu1")
	if m := showMap(t, c2, qwenUnit, "ActiveState"); m["ActiveState"] != "inactive" {
		t.Fatalf("the stop must have taken effect before the drop: %v", m)
	}
	if _, _, code := c2.run(t, "systemctl", "start", qwenUnit); code != 0 {
		t.Fatalf("second control command (fault is once): %d", code)
	}
}

func TestCrashOnStartUntilRollback(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.Faults = []Fault{{Name: "crash-on-start"}}
	l := readyLab(t, opts)
	h := l.Host("gpu1")
	c := dialHost(t, l, "gpu1")
	p := "/etc/systemd/system/" + qwenUnit
	orig, _ := h.ReadFile(p)
	changed := strings.Replace(string(orig), "--speculative-num-steps 3", "--speculative-num-steps 4", 1)
	changed = strings.Replace(changed, "--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 5", 1)
	if err := h.WriteFile(p, []byte(changed)); err != nil {
		t.Fatal(err)
	}
	c.must(t, "systemctl", "daemon-reload")
	c.must(t, "systemctl", "restart", qwenUnit)
	testkit.WaitFor(t, 5*time.Second, "crash loop", func() bool {
		return h.Unit(qwenUnit).NRestarts >= 1
	})
	if j := c.must(t, "journalctl", "-u", qwenUnit, "-o", "cat"); !strings.Contains(j, "Traceback (most recent call last):") {
		t.Fatalf("no traceback:\n%s", j)
	}
	if err := h.WriteFile(p, orig); err != nil {
		t.Fatal(err)
	}
	c.must(t, "systemctl", "daemon-reload")
	c.must(t, "systemctl", "restart", qwenUnit)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatalf("rollback did not start: %v", err)
	}
}

func TestSSHRefusesUnknownKey(t *testing.T) {
	t.Parallel()
	l := startLab(t, fastOpts())
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	cfg := clientConfig(t, l)
	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(signer)}
	if c, err := ssh.Dial("tcp", l.Host("gpu1").Addr(), cfg); err == nil {
		c.Close()
		t.Fatal("a key the lab did not issue was accepted")
	}
	// The pve host key is not gpu1's: known_hosts pinning must catch a swap.
	cfg = clientConfig(t, l)
	want := l.Host("pve").HostKey()
	cfg.HostKeyCallback = ssh.FixedHostKey(want)
	if c, err := ssh.Dial("tcp", l.Host("gpu1").Addr(), cfg); err == nil {
		c.Close()
		t.Fatal("gpu1 presented pve's host key")
	}
}

// TestCloseStopsEverything counts the process's goroutines, so it runs
// alone: not in parallel with the package's other tests, whose labs and
// routers start and end goroutines of their own.
func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	l, err := Start(context.Background(), fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	c := dialHost(t, l, "gpu1")
	go c.Run(context.Background(), nil, "sleep", "60")
	url := l.Topology().Services[0].URL
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if code := healthCode(url); code != 0 {
		t.Fatalf("engine still answers after Close: %d", code)
	}
	c.c.Close()
	testkit.WaitFor(t, 5*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before+2 })
}

func itoa(n int) string { return strconv.Itoa(n) }
