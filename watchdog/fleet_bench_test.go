package watchdog

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// BenchmarkFleetScale measures opsbot at 8, 32, 128 and 256 simulated
// Proxmox nodes of 2 services each (lab.StartFleetPer; every container its
// own SSH host on loopback): per watchdog pass over every service its wall
// time and this process's CPU, the `fleet` answer's latency (through the
// door, as a chat asks for it), the SSH connections the runbook holds
// (ops.Runbook.SSHStats), this process's RSS, and whether one pass at the
// default 15 s interval finds a restart loop made on one service (an
// incident opened for it) and how long that pass took. The simulated hosts
// run in this process: CPU and RSS are the bot's and the lab's together.
// Run one size with -bench 'FleetScale/nodes=8$'; it prints figures and
// asserts none. docs/figures.md has the table it gave.
func BenchmarkFleetScale(b *testing.B) {
	for _, nodes := range []int{8, 32, 128, 256} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { fleetScale(b, nodes) })
	}
}

func fleetScale(b *testing.B, nodes int) {
	ctx := context.Background()
	n := 2 * nodes
	t0 := time.Now()
	f, err := lab.StartFleetPer(ctx, n, 2, lab.Options{TimeScale: 25})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := f.WaitReady(wctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d nodes, %d services ready in %s", nodes, n, time.Since(t0).Round(time.Second))
	path, err := f.WriteConfig(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	app, rb := scaleApp(b, f.Topology(), path)
	w, err := NewWatchdog(app, WatchdogOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// The first pass dials every host; later ones reuse the connections.
	if rep, err := w.Pass(ctx, time.Now()); err != nil || rep.Checked != n || len(rep.Opened) != 0 {
		b.Fatalf("first pass: %+v %v", rep, err)
	}
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
	cpuPass := float64((cpuTime() - cpu0).Microseconds()) / 1000 / float64(passes)
	wallPass := float64(time.Since(wall0).Microseconds()) / 1000 / float64(passes)

	// fleet, through the door, three times: the median.
	var lat []time.Duration
	var rows, answered int
	for range 3 {
		t := time.Now()
		r := app.Dispatcher.Handle(ctx, bot.Request{Platform: "console", User: "bench", Room: "ops", Text: "fleet"})
		lat = append(lat, time.Since(t))
		if r.Outcome != bot.Answered || r.Fleet == nil {
			b.Fatalf("fleet: %v %s", r.Outcome, r.Text)
		}
		rows, answered = len(r.Fleet.Services), r.Fleet.Hosts.Answered
	}
	slices.Sort(lat)
	conns := 0
	for _, h := range rb.SSHStats() {
		if h.Connected {
			conns++
		}
	}
	rss := rssMB()

	// A restart loop on one service: found by the next pass?
	l := f.Labs[len(f.Labs)/2]
	victim := l.Topology().Services[0]
	if err := l.RestartLeavingWorkers(ctx, victim.Name); err != nil {
		b.Fatal(err)
	}
	if !testkit.Poll(time.Minute, func() bool { return l.Host(victim.Host).Unit(victim.Unit).NRestarts > 0 }) {
		b.Fatalf("%s did not loop", victim.Name)
	}
	tp := time.Now()
	rep, err := w.Pass(ctx, time.Now())
	loopPass := time.Since(tp)
	found := false
	if err == nil && len(rep.Opened) > 0 {
		in, ierr := app.Store.OpenIncidentOf(ctx, victim.Name)
		found = ierr == nil && in.Kind == IncidentLoop
	}
	b.ReportMetric(cpuPass, "cpu-ms/pass")
	b.ReportMetric(wallPass, "wall-ms/pass")
	b.ReportMetric(float64(lat[1].Microseconds())/1000, "fleet-ms")
	b.ReportMetric(float64(conns), "ssh-conns")
	b.ReportMetric(rss, "rss-MB")
	fmt.Printf("FLEET nodes=%d services=%d | cpu/pass %.0f ms (%.1f%% of a core at 15 s) | wall/pass %.0f ms | fleet %s (rows %d, hosts answered %d) | ssh conns %d of %d hosts | RSS %.0f MB | restart loop found in one pass: %v (pass %s)\n",
		nodes, n, cpuPass, cpuPass/150, wallPass, lat[1].Round(time.Millisecond), rows, answered, conns, len(rb.SSHStats()), rss, found, loopPass.Round(time.Millisecond))
}

// scaleApp is apptest.Topology keeping the runbook, for its SSH figures.
func scaleApp(b *testing.B, topo lab.Topology, path string) (*bot.App, *ops.Runbook) {
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	var rb *ops.Runbook
	newBackend := func(deps bot.BackendDeps) (jobs.Backend, error) {
		oc := labtest.OpsConfig(b, topo, 60*time.Second)
		oc.NodeLocks = deps.Nodes
		var err error
		if rb, err = ops.New(oc); err != nil {
			return nil, err
		}
		b.Cleanup(func() { rb.Close() })
		return jobs.RunbookBackend(rb), nil
	}
	app, err := bot.NewApp(context.Background(), cfg, bot.AppOptions{NewBackend: newBackend,
		Chats: map[string]bot.Chat{"console": chatrec.New()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { app.Close() })
	return app, rb
}

// rssMB is this process's resident set (VmRSS), in MB.
func rssMB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}
