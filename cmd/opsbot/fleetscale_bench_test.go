package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/watchdog"
)

// BenchmarkFleetScale measures opsbot alone at 8, 32, 128 and 256 simulated
// Proxmox nodes of 2 services each. The lab runs in a process of its own
// (`opsbot lab --services 2N --per-node 2 --faults orphans`, this test
// binary run as opsbot); this process is the bot only, assembled from the
// config the lab wrote as `opsbot serve` assembles it (setup). It measures,
// for this process alone: a watchdog pass over every service (the hardware
// checks of every node included, as configured by default), its wall time
// and CPU (getrusage RUSAGE_SELF), and the CPU over a whole 15 s interval
// that starts with a pass (the default watchdog.interval: the share of one
// core the watchdog costs, its idle between passes included); `fleet`
// through the door (the median of 3); the SSH connections the runbook holds
// (ops.Runbook.SSHStats) beside the TCP connections the kernel lists to the
// lab's SSH ports and to its engines; RSS (VmRSS) and its peak (VmHWM), and
// the Go heap; and whether the first pass after a restart loop began on one
// service opens its incident (the loop made as a person would: `systemctl
// restart UNIT` over SSH while every stop leaves the engine's workers
// holding GPU memory, the lab's orphans fault). The lab process is killed
// at the end, also on failure, and everything it wrote lies in the
// benchmark's temporary directory. Run one size with -bench
// 'FleetScale/nodes=8$'; it prints figures and asserts none.
// docs/figures.md has the table it gave.
func BenchmarkFleetScale(b *testing.B) {
	for _, nodes := range []int{8, 32, 128, 256} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { fleetScale(b, nodes) })
	}
}

// fleetInterval is the default watchdog.interval the share of a core is
// taken over.
const fleetInterval = 15 * time.Second

func fleetScale(b *testing.B, nodes int) {
	ctx := context.Background()
	n := 2 * nodes
	t0 := time.Now()
	cfgPath := startFleetLab(b, n, 2)
	b.Logf("%d nodes, %d services serve (lab process) in %s", nodes, n, time.Since(t0).Round(time.Second))
	cfg, err := config.Load(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	e, err := setup(ctx, setupOptions{ConfigPath: cfgPath, Chats: map[string]bot.Chat{"console": chatrec.New()}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	w, err := watchdog.NewWatchdog(e.app, watchdog.WatchdogOptions{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	// The first pass dials every host; later ones reuse the connections.
	t1 := time.Now()
	if rep, err := w.Pass(ctx, time.Now()); err != nil || rep.Checked != n || len(rep.Opened) != 0 {
		b.Fatalf("first pass: %+v %v", rep, err)
	}
	firstPass := time.Since(t1)
	stopProfile := passProfile(b)
	cpu0, wall0 := cpuTime(), time.Now()
	passes := 0
	b.ResetTimer()
	for b.Loop() {
		if rep, err := w.Pass(ctx, time.Now()); err != nil || rep.Checked != n || len(rep.Opened) != 0 {
			b.Fatalf("pass: %+v %v", rep, err)
		}
		passes++
	}
	b.StopTimer()
	stopProfile()
	cpuPass := float64((cpuTime() - cpu0).Microseconds()) / 1000 / float64(passes)
	wallPass := float64(time.Since(wall0).Microseconds()) / 1000 / float64(passes)

	// One whole interval as the watchdog spends it: a pass, then nothing
	// until the next (keepalives, the store's heartbeat, the GC).
	cpuI, startI := cpuTime(), time.Now()
	if _, err := w.Pass(ctx, time.Now()); err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Until(startI.Add(fleetInterval))) // a measuring window, not a wait for a condition
	share := float64(cpuTime()-cpuI) / float64(time.Since(startI)) * 100

	// fleet, through the door, three times: the median.
	var lat []time.Duration
	var rows, answered int
	for range 3 {
		t := time.Now()
		r := e.app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "bench", Room: "ops", Text: "fleet"})
		lat = append(lat, time.Since(t))
		if r.Outcome != bot.Answered || r.Fleet == nil {
			b.Fatalf("fleet: %v %s", r.Outcome, r.Text)
		}
		rows, answered = len(r.Fleet.Services), r.Fleet.Hosts.Answered
	}
	slices.Sort(lat)
	stats := e.runbooks.SSHStats()
	conns := 0
	for _, h := range stats {
		if h.Connected {
			conns++
		}
	}
	sshTCP, engineTCP := labConnections(b, cfg)
	rss, hwm := procStatusMB("VmRSS"), procStatusMB("VmHWM")
	heap := goHeapMB()

	// A restart loop on one service: found by the next pass?
	victim := fleetVictim(nodes)
	svc := cfg.Services[victim]
	looping := restartBehindTheBot(b, cfg, svc.Host, svc.Unit)
	b.Logf("%s loops %s after `systemctl restart %s`", victim, looping.Round(time.Millisecond), svc.Unit)
	tp := time.Now()
	rep, err := w.Pass(ctx, time.Now())
	loopPass := time.Since(tp)
	found := false
	if err == nil && len(rep.Opened) > 0 {
		in, ierr := e.app.Store.OpenIncidentOf(ctx, victim)
		found = ierr == nil && in.Kind == watchdog.IncidentLoop
	}
	load := loadAverage()
	b.ReportMetric(cpuPass, "cpu-ms/pass")
	b.ReportMetric(wallPass, "wall-ms/pass")
	b.ReportMetric(share, "%core@15s")
	b.ReportMetric(float64(lat[1].Microseconds())/1000, "fleet-ms")
	b.ReportMetric(float64(conns), "ssh-conns")
	b.ReportMetric(rss, "rss-MB")
	b.ReportMetric(hwm, "hwm-MB")
	fmt.Printf("FLEET nodes=%d services=%d | cpu/pass %.0f ms (%.1f%% of a core at 15 s from the pass alone) | whole 15 s interval: %.2f%% of a core | wall/pass %.0f ms (first, dialling: %s) | fleet %s (rows %d, hosts answered %d) | ssh conns %d of %d hosts (kernel: %d TCP to the lab's sshd, %d to its engines) | RSS %.0f MB, peak %.0f MB, Go heap %.0f MB | restart loop found by the next pass: %v (pass %s) | load average %s\n",
		nodes, n, cpuPass, cpuPass/float64(fleetInterval.Milliseconds())*100, share, wallPass, firstPass.Round(time.Millisecond),
		lat[1].Round(time.Millisecond), rows, answered, conns, len(stats), sshTCP, engineTCP, rss, hwm, heap, found, loopPass.Round(time.Millisecond), load)
}

// passProfileEnv, when set to a file, is where BenchmarkFleetScale writes a
// CPU profile of its measured passes only (without -cpuprofile, which
// profiles the whole run: the first pass's dials, `fleet`, the set-up).
const passProfileEnv = "OPSBOT_FLEET_PASS_PROFILE"

func passProfile(b *testing.B) (stop func()) {
	path := os.Getenv(passProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// startFleetLab runs `opsbot lab --services n --per-node per --faults
// orphans` in a process of its own (this binary as opsbot, TestMain) and
// returns the config it wrote once every service serves. The process is
// stopped when the benchmark ends (SIGTERM, then SIGKILL after 30 s; it is
// also killed should this process die first), and its temporary files lie
// in the benchmark's temporary directory.
func startFleetLab(b *testing.B, n, per int) string {
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "opsbot.yaml")
	stderr, err := os.Create(filepath.Join(dir, "lab.stderr"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "lab", "--services", strconv.Itoa(n), "--per-node", strconv.Itoa(per),
		"--faults", "orphans", "--config-out", cfgPath)
	cmd.Env = append(os.Environ(), "OPSBOT_TEST_MAIN=1", "TMPDIR="+dir)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		said := false
		for sc.Scan() {
			if !said && strings.HasPrefix(sc.Text(), "every service serves") {
				said = true
				close(serving)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		stderr.Close()
		close(exited)
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case <-serving:
		return cfgPath
	case <-exited:
		msg, _ := os.ReadFile(stderr.Name())
		b.Fatalf("the lab process exited before every service served: %s\n%s", cmd.ProcessState, tail(string(msg), 2000))
	case <-time.After(10 * time.Minute):
		b.Fatalf("the lab's %d services did not all serve within 10 minutes", n)
	}
	return ""
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// fleetVictim is the first service of the middle node.
func fleetVictim(nodes int) string {
	return fmt.Sprintf("n%d-s1", nodes/2+1)
}

// restartBehindTheBot runs `systemctl restart UNIT` on host over an SSH
// connection of its own, as a person would, and returns how long until
// systemd restarted the unit by itself (NRestarts above 0: the loop).
func restartBehindTheBot(b *testing.B, cfg *config.Config, host, unit string) time.Duration {
	signer, err := remote.LoadSigner(cfg.SSH.KeyFile)
	if err != nil {
		b.Fatal(err)
	}
	h := cfg.Hosts[host]
	pool, err := remote.NewPool(remote.Config{Hosts: map[string]remote.HostConfig{host: {Addr: h.Addr, User: h.User}},
		Signer: signer, KnownHosts: cfg.SSH.KnownHosts})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	rh, err := pool.Host(host)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	if out, err := rh.Run(ctx, nil, "systemctl", "restart", unit); err != nil || out.ExitStatus != 0 {
		b.Fatalf("systemctl restart %s on %s: %v %s", unit, host, err, out.Stderr)
	}
	looped := testkit.Poll(time.Minute, func() bool {
		out, err := rh.Run(ctx, nil, "systemctl", "show", "-p", "NRestarts", "--value", unit)
		v, _ := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
		return err == nil && v > 0
	})
	if !looped {
		b.Fatalf("%s on %s did not loop", unit, host)
	}
	return time.Since(t0)
}

// labConnections counts, in the kernel's table, the established TCP
// connections to the lab's SSH servers (the ports of cfg's hosts) and to
// its engines (the ports of its services' URLs): only this process
// connects to them.
func labConnections(b *testing.B, cfg *config.Config) (ssh, engines int) {
	sshPorts, enginePorts := map[int]bool{}, map[int]bool{}
	for _, h := range cfg.Hosts {
		if _, p, ok := strings.Cut(h.Addr, ":"); ok {
			v, _ := strconv.Atoi(p)
			sshPorts[v] = true
		}
	}
	for _, s := range cfg.Services {
		if i := strings.LastIndex(s.URL, ":"); i >= 0 {
			v, _ := strconv.Atoi(strings.TrimRight(s.URL[i+1:], "/"))
			enginePorts[v] = true
		}
	}
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "01" { // ESTABLISHED
			continue
		}
		_, rp, _ := strings.Cut(f[2], ":")
		port, err := strconv.ParseInt(rp, 16, 32)
		if err != nil {
			continue
		}
		switch {
		case sshPorts[int(port)]:
			ssh++
		case enginePorts[int(port)]:
			engines++
		}
	}
	return ssh, engines
}

// procStatusMB is a /proc/self/status size field (VmRSS, VmHWM) in MB.
func procStatusMB(field string) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// goHeapMB is the Go heap in use (live and not yet swept objects), in MB.
func goHeapMB() float64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

// cpuTime is this process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the machine's 1, 5 and 15 minute load average.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
