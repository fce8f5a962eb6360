package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops/remote"
)

// fakeProc is a process of fakeHost. onTerm: "die", "ignore" or "D" (enters
// D state, then ignores everything).
type fakeProc struct {
	stat, args, cgroup, onTerm string
	mib                        int
	fd                         bool
}

// fakeHost answers the argv forms this package sends, from a process table.
type fakeHost struct {
	mu      sync.Mutex
	procs   map[int]*fakeProc
	used    []int
	signals []string
	ran     [][]string
}

func (h *fakeHost) Run(ctx context.Context, stdin []byte, argv ...string) (remote.Output, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ran = append(h.ran, argv)
	var o, e strings.Builder
	code := 0
	pidsOf := func(s string) []int {
		var out []int
		for _, f := range strings.Split(s, ",") {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	switch {
	case argv[0] == "nvidia-smi" && strings.HasPrefix(argv[1], "--query-gpu"):
		for i, u := range h.used {
			fmt.Fprintf(&o, "%d, %d, 81559\n", i, u)
		}
	case argv[0] == "nvidia-smi":
		for _, pid := range h.sorted() {
			if p := h.procs[pid]; p.mib > 0 {
				fmt.Fprintf(&o, "%d, %d\n", pid, p.mib)
			}
		}
	case argv[0] == "ls":
		o.WriteString("null\nnvidia-caps\nnvidia-uvm\nnvidia0\nnvidia1\nnvidiactl\ntty\n")
	case argv[0] == "fuser":
		code = 1
		for _, pid := range h.sorted() {
			if h.procs[pid].fd {
				fmt.Fprintf(&o, " %d", pid)
				code = 0
			}
		}
	case argv[0] == "ps":
		code = 1
		for _, pid := range pidsOf(argv[4]) {
			p := h.procs[pid]
			if p == nil {
				continue
			}
			code = 0
			switch argv[2] {
			case "pid=,ppid=,stat=,args=":
				fmt.Fprintf(&o, "%7d %7d %-4s %s\n", pid, 1, p.stat, p.args)
			case "pid=,stat=":
				fmt.Fprintf(&o, "%7d %s\n", pid, p.stat)
			case "pid=,cgroup=":
				fmt.Fprintf(&o, "%7d 0::%s\n", pid, p.cgroup)
			}
		}
	case argv[0] == "kill":
		sig := strings.TrimPrefix(argv[1], "-")
		for _, a := range argv[2:] {
			pid, _ := strconv.Atoi(a)
			p := h.procs[pid]
			if p == nil {
				fmt.Fprintf(&e, "kill: (%d) - No such process\n", pid)
				code = 1
				continue
			}
			h.signals = append(h.signals, sig+" "+a)
			switch {
			case p.stat[0] == 'D':
			case sig == "KILL" || p.onTerm == "die":
				delete(h.procs, pid)
			case p.onTerm == "D":
				p.stat = "Dl"
			}
		}
	default:
		return remote.Output{}, fmt.Errorf("fake host: unexpected %q", argv)
	}
	return remote.Output{Stdout: []byte(o.String()), Stderr: []byte(e.String()), ExitStatus: code}, nil
}

func (h *fakeHost) sorted() []int {
	var pids []int
	for pid := range h.procs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

func incidentHost() *fakeHost {
	return &fakeHost{used: []int{80000, 80000}, procs: map[int]*fakeProc{
		1300: {stat: "Ss", args: "/usr/bin/nvidia-persistenced --user nvidia-persistenced", fd: true, onTerm: "die"},
		1310: {stat: "Ssl", args: "/usr/bin/nv-hostengine -n", fd: true, onTerm: "die"},
		4242: {stat: "Sl", args: "sglang::scheduler_TP0", mib: 80000, fd: true, onTerm: "ignore", cgroup: "/"},
		4243: {stat: "Sl", args: "sglang::scheduler_TP1", mib: 80000, fd: true, onTerm: "die", cgroup: "/"},
		5000: {stat: "S", args: "python3 stray.py", mib: 100, fd: true, onTerm: "die", cgroup: "/user.slice"},
	}}
}

func TestHoldersCombines(t *testing.T) {
	h := incidentHost()
	ps, err := Holders(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, fmt.Sprintf("%d %s e=%v d=%v mib=%d cg=%s", p.PID, p.State, p.Engine, p.Daemon, p.UsedMiB, p.Cgroup))
	}
	want := []string{"1300 S e=false d=true mib=0 cg=", "1310 S e=false d=true mib=0 cg=", "4242 S e=true d=false mib=80000 cg=/",
		"4243 S e=true d=false mib=80000 cg=/", "5000 S e=false d=false mib=100 cg=/user.slice"}
	if !slices.Equal(got, want) {
		t.Fatalf("holders\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var fused []string
	for _, argv := range h.ran {
		if argv[0] == "fuser" {
			if len(argv) != 2 {
				t.Fatalf("fuser argv %q: one device file per call, or the PIDs cannot be told apart", argv)
			}
			fused = append(fused, argv[1])
		}
	}
	if !slices.Equal(fused, []string{"/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}) {
		t.Fatalf("fuser ran on %q", fused)
	}
	if g := ps[2].GPUs; len(g) != 2 || g[0].Index != 0 || g[1].Index != 1 {
		t.Fatalf("PID 4242 holds GPUs %+v, want 0 and 1 from its device files", g)
	}
}

func TestReapTermThenKill(t *testing.T) {
	h := incidentHost()
	ps, err := Holders(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	var progress []string
	killed, err := Reap(context.Background(), h, ps, ReapOptions{Grace: 30 * time.Millisecond, Poll: time.Millisecond, Progress: func(s string) { progress = append(progress, s) }})
	if err != nil {
		t.Fatal(err)
	}
	want := []Killed{{4243, "sglang::scheduler_TP1", "TERM"}, {4242, "sglang::scheduler_TP0", "KILL"}}
	if !slices.Equal(killed, want) {
		t.Fatalf("killed %+v, want %+v", killed, want)
	}
	if !slices.Equal(h.signals, []string{"TERM 4242", "TERM 4243", "KILL 4242"}) {
		t.Fatalf("signals %q: daemons or the stray were signalled", h.signals)
	}
	if h.procs[1300] == nil || h.procs[1310] == nil || h.procs[5000] == nil {
		t.Fatal("a non-engine process was killed")
	}
	if !slices.ContainsFunc(progress, func(s string) bool { return strings.Contains(s, "PID 5000 (python3): not an engine process") }) {
		t.Fatalf("progress %q does not report the stray", progress)
	}
}

func TestReapForceNeverDaemons(t *testing.T) {
	h := incidentHost()
	ps, _ := Holders(context.Background(), h)
	for i := range ps {
		ps[i].Daemon = false // a caller's mistake: Reap checks the command line again
	}
	if _, err := Reap(context.Background(), h, ps, ReapOptions{Grace: 10 * time.Millisecond, Poll: time.Millisecond, Force: true}); err != nil {
		t.Fatal(err)
	}
	if h.procs[1300] == nil || h.procs[1310] == nil || h.procs[5000] != nil {
		t.Fatalf("after a forced reap: %v", h.sorted())
	}
}

func TestReapReusedPID(t *testing.T) {
	h := incidentHost()
	ps, _ := Holders(context.Background(), h)
	h.procs[4243].args = "bash"
	if _, err := Reap(context.Background(), h, ps, ReapOptions{Grace: 10 * time.Millisecond, Poll: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if h.procs[4243] == nil {
		t.Fatal("a reused PID was killed")
	}
}

func TestReapStuck(t *testing.T) {
	h := incidentHost()
	h.procs[4242].onTerm = "D"
	ps, _ := Holders(context.Background(), h)
	start := time.Now()
	killed, err := Reap(context.Background(), h, ps, ReapOptions{Grace: 20 * time.Millisecond, KillWait: 20 * time.Millisecond, Poll: time.Millisecond})
	var se *StuckError
	if !errors.As(err, &se) || !slices.Equal(se.PIDs, []int{4242}) {
		t.Fatalf("err %v, want *StuckError for 4242", err)
	}
	const msg = "PID 4242 (sglang::scheduler_TP0) is in D state: no signal can kill it; only a reboot of the host frees the GPU"
	if err.Error() != msg {
		t.Fatalf("message %q", err)
	}
	if !slices.Equal(killed, []Killed{{4243, "sglang::scheduler_TP1", "TERM"}}) {
		t.Fatalf("killed %+v", killed)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestWaitClear(t *testing.T) {
	h := &fakeHost{used: []int{500, 80000}}
	go func() {
		time.Sleep(5 * time.Millisecond) // the driver releasing memory later, not a wait for a condition
		h.mu.Lock()
		h.used[1] = 0
		h.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := WaitClear(ctx, h, nil, 1024, time.Millisecond)
	if err != nil || len(gs) != 2 || gs[1].UsedMiB != 0 {
		t.Fatalf("%+v %v", gs, err)
	}
	if _, err := WaitClear(ctx, h, []int{7}, 100, time.Millisecond); err == nil || !strings.Contains(err.Error(), "no GPU 7") {
		t.Fatalf("missing GPU: %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	gs, err = WaitClear(short, h, []int{0}, 100, time.Millisecond)
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, context.DeadlineExceeded) || len(gs) != 1 || !strings.Contains(err.Error(), "GPU 0 500 MiB") {
		t.Fatalf("%+v %v, want *HeldError naming GPU 0", gs, err)
	}
}
