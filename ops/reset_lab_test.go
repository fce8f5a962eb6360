package ops_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
)

// resetRig is a rig whose opsbot waits are scaled with the lab's clock, so
// that real time × scale is lab time: the grace before SIGKILL, the window
// after which memory no process holds counts as stranded, the settle time.
func resetRig(t *testing.T, scale float64, faults ...lab.Fault) *rig {
	t.Helper()
	return newRig(t, labOptsScale(scale, faults...), func(c *ops.Config) {
		c.ReapGrace = time.Duration(float64(5*time.Second) / scale)
		c.StrandedAfter = time.Duration(float64(ops.DefaultStrandedAfter) / scale)
		c.SettleTime = time.Duration(float64(time.Second) / scale)
		c.Poll = 10 * time.Millisecond
	})
}

// coderState is what the neighbour has on the node: its processes (host
// PIDs) and the memory of its GPUs.
func coderState(l *lab.Lab) (pids []int, mib map[int]int) {
	mib = map[int]int{}
	for _, g := range l.Host("pve").GPUs() {
		if g.Index >= 4 {
			mib[g.Index] = g.UsedMiB
		}
	}
	for _, p := range l.Host("gpu2").Processes() {
		pids = append(pids, p.HostPID)
	}
	return pids, mib
}

// The seed's night, replayed with memory held by no process: qwen is
// restarted behind opsbot's back while its workers are busy in CUDA
// teardown, falls into the restart loop, and the memory of its GPU 2 stays
// held by no process once the workers are gone. `gpu recover qwen` stops the
// loop, reaps the workers, notices the stranded memory within
// StrandedAfter and offers `gpu reset 2 pve`; the reset frees it and qwen
// serves again, with no reboot. The neighbour coder, on GPUs 4-7 of the
// same node, keeps its processes and memory. Prints the figure in lab time.
func TestSeedNightStrandedMemoryReset(t *testing.T) {
	t.Parallel()
	const scale = 25
	r := resetRig(t, scale, lab.Fault{Name: "stuck-memory", GPU: 2})
	ctx := testkit.Context(t, 120*time.Second)
	if err := r.lab.WaitReady(ctx, "coder"); err != nil {
		t.Fatal(err)
	}
	if err := r.lab.RestartLeavingWorkers(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	coderPIDs, coderMiB := coderState(r.lab)
	persist := r.lab.GPUResets()

	t0 := time.Now()
	ev := &events{}
	res, err := r.rb.GPURecover(ctx, "qwen", ops.RecoverOptions{}, ev)
	var se *ops.StrandedError
	if !errors.As(err, &se) {
		t.Fatalf("gpu recover: %v, want memory held by no process offered a reset\n%s", err, ev.text())
	}
	offered := time.Since(t0)
	if !reflect.DeepEqual(se.GPUs, []int{2}) || se.Node != "pve" {
		t.Fatalf("stranded %+v, want GPU 2 of pve", se)
	}
	if l := res.Left; l == nil || l.NextStep != ops.NextReset || !reflect.DeepEqual(l.ResetGPUs, []int{2}) || l.Node != "pve" {
		t.Fatalf("left %+v, want the reset of GPU 2 of pve offered\n%s", res.Left, ev.text())
	}
	if len(res.Killed) == 0 {
		t.Fatalf("the orphaned workers were not reaped\n%s", ev.text())
	}

	rev := &events{}
	res, err = r.rb.GPUReset(ctx, "pve", []int{2}, []string{"qwen"}, false, rev)
	if err != nil {
		t.Fatalf("gpu reset 2: %v\n%s", err, rev.text())
	}
	total := time.Since(t0)
	if res.Left == nil || res.Left.State != ops.LeftServing {
		t.Fatalf("qwen left %+v, want serving\n%s", res.Left, rev.text())
	}
	if !strings.Contains(res.Summary, "qwen serving again") || !strings.Contains(res.Summary, "persistence restored") {
		t.Errorf("summary %q", res.Summary)
	}
	after := r.lab.GPUResets()
	for i, g := range after {
		if g.Persistence != persist[i].Persistence {
			t.Errorf("GPU %d persistence %v after, %v before", g.Index, g.Persistence, persist[i].Persistence)
		}
		if wantResets := map[bool]int{true: 1, false: 0}[g.Index == 2]; g.Resets != wantResets {
			t.Errorf("GPU %d reset %d times, want %d", g.Index, g.Resets, wantResets)
		}
	}
	if pids, mib := coderState(r.lab); !reflect.DeepEqual(pids, coderPIDs) || !reflect.DeepEqual(mib, coderMiB) {
		t.Errorf("coder changed: PIDs %v -> %v, MiB %v -> %v", coderPIDs, pids, coderMiB, mib)
	}
	fmt.Printf("figure: seed's night with memory held by no process: gpu recover -> reset offered in %s of lab time, "+
		"-> qwen serving again after gpu reset 2 in %s of lab time (x%d, real %s; no reboot)\n",
		(offered * scale).Round(100*time.Millisecond), (total * scale).Round(100*time.Millisecond), scale, total.Round(time.Millisecond))
}

// A reset is refused, changing nothing, while a process holds the GPU: the
// holder is listed with whose it is; persistence mode stays as it was.
func TestResetRefusedWhileHeld(t *testing.T) {
	t.Parallel()
	r := resetRig(t, 1000)
	ctx := testkit.Context(t, 60*time.Second)
	before := r.lab.GPUResets()
	ev := &events{}
	_, err := r.rb.GPUReset(ctx, "pve", []int{1}, []string{"qwen"}, false, ev)
	var re *ops.ResetRefusedError
	if !errors.As(err, &re) {
		t.Fatalf("reset of qwen's GPU 1 while it serves: %v, want refused\n%s", err, ev.text())
	}
	msg := err.Error()
	for _, want := range []string{"nothing changed", "qwen (sglang-qwen.service on gpu1) is active/running", "holds GPU 1: qwen's", "sglang"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q: %s", want, msg)
		}
	}
	if !reflect.DeepEqual(r.lab.GPUResets(), before) {
		t.Errorf("persistence or resets changed: %+v -> %+v", before, r.lab.GPUResets())
	}
	// A stray process on a GPU no service uses is named too.
	stray, err := r.lab.Host("pve").HoldGPU(1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.rb.GPURecover(ctx, "qwen", ops.RecoverOptions{NoStart: true}, ev); err != nil {
		t.Fatalf("stop qwen: %v", err)
	}
	_, err = r.rb.GPUReset(ctx, "pve", []int{1}, []string{"qwen"}, false, ev)
	if !errors.As(err, &re) || !strings.Contains(err.Error(), fmt.Sprintf("PID %d (python3 stray.py, state S) holds GPU 1: not qwen's", stray.HostPID)) {
		t.Fatalf("reset with a stray holder: %v", err)
	}
}

// A GPU that another service uses is never reset unless the confirmation
// named it; named, it is reset and that service started again.
func TestResetNamesTheNeighbour(t *testing.T) {
	t.Parallel()
	r := resetRig(t, 1000)
	ctx := testkit.Context(t, 60*time.Second)
	if err := r.lab.WaitReady(ctx, "coder"); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	_, err := r.rb.GPUReset(ctx, "pve", []int{3, 4}, []string{"qwen"}, false, ev)
	if err == nil || !strings.Contains(err.Error(), "coder uses GPU 4, and the confirmation did not name it") {
		t.Fatalf("reset of coder's GPU 4 not named: %v", err)
	}
	for _, s := range []string{"qwen", "coder"} {
		if _, err := r.rb.ServiceAction(ctx, s, "stop", false, ops.Discard); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.rb.GPUReset(ctx, "pve", []int{3, 4}, []string{"coder", "qwen"}, false, ev)
	if err != nil {
		t.Fatalf("gpu reset 3 4: %v\n%s", err, ev.text())
	}
	if !strings.Contains(res.Summary, "coder, qwen serving again") {
		t.Errorf("summary %q", res.Summary)
	}
}

// Where the driver refuses `nvidia-smi -pm 0 -i N`, the reset stops
// nvidia-persistenced instead, names the other GPUs whose persistence drops
// with it, and puts persistence back on every GPU afterwards.
func TestResetPersistenceHeldStopsTheDaemon(t *testing.T) {
	t.Parallel()
	r := resetRig(t, 1000, lab.Fault{Name: "persistence-held", GPU: 2})
	ctx := testkit.Context(t, 60*time.Second)
	if _, err := r.rb.ServiceAction(ctx, "qwen", "stop", false, ops.Discard); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	if _, err := r.rb.GPUReset(ctx, "pve", []int{2}, []string{"qwen"}, false, ev); err != nil {
		t.Fatalf("gpu reset 2: %v\n%s", err, ev.text())
	}
	thread := ev.text()
	for _, want := range []string{"Unknown Error", "stopping nvidia-persistenced.service instead, which drops persistence mode on GPUs 0,1,3,4,5,6,7 too (qwen's 0,1,3; coder's 4,5,6,7)",
		"restore persistence done: persistence mode back as it was"} {
		if !strings.Contains(thread, want) {
			t.Errorf("thread lacks %q:\n%s", want, thread)
		}
	}
	for _, g := range r.lab.GPUResets() {
		if !g.Persistence {
			t.Errorf("GPU %d: persistence not restored", g.Index)
		}
	}
	if u := r.lab.Host("pve").Unit("nvidia-persistenced.service"); u.ActiveState != "active" {
		t.Errorf("nvidia-persistenced is %s after the reset", u.ActiveState)
	}
}

// A holder in D state: the reset is refused and says that only a reboot of
// the node helps, naming the services it takes down.
func TestResetDStateAdvisesReboot(t *testing.T) {
	t.Parallel()
	r := resetRig(t, 1000, lab.Fault{Name: "dstate"})
	ctx := testkit.Context(t, 60*time.Second)
	if _, err := r.rb.GPURecover(ctx, "qwen", ops.RecoverOptions{}, ops.Discard); err == nil {
		t.Fatal("gpu recover cleared a D-state holder")
	}
	res, err := r.rb.GPUReset(ctx, "pve", []int{0}, []string{"qwen"}, false, ops.Discard)
	var re *ops.ResetRefusedError
	if !errors.As(err, &re) || !re.Stuck {
		t.Fatalf("reset with a D-state holder: %v", err)
	}
	for _, want := range []string{"state D) holds GPU 0: qwen's", "reboot pve, which takes down coder, qwen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %s", want, err)
		}
	}
	if !res.HasIncident(ops.IncidentStuckProcess) {
		t.Errorf("incidents %v", res.Incidents)
	}
}
