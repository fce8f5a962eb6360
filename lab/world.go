package lab

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// world is the shared simulated machine: one Proxmox node, its containers, their processes and
// the GPUs. One mutex (mu) guards all of it. Code that must call out (engine methods, network
// I/O) queues a function with w.later while holding mu; unlock runs them after releasing mu.
type world struct {
	mu      sync.Mutex
	closed  bool
	scale   float64 // simulated seconds per real second
	log     *slog.Logger
	changed chan struct{} // closed and replaced whenever state may have changed
	post    []func()
	timers  map[*simTimer]struct{}

	procs       map[int]*proc // by host pid
	nextHostPID int
	gpus        []*gpu
	releases    []release // memory of dead holders, released later
	releaseLag  time.Duration
	killed      []ProcInfo // daemons (nvidia-persistenced, nv-hostengine) that were killed

	node       *SimHost
	containers map[int]*container

	// slowdown multiplies the verify step time of engines started from now
	// on (Lab.SlowEngine); 0 or 1 is the default physics.
	slowdown float64
	// slowSteps slows engines started with these steps (SlowSteps).
	slowSteps map[int]float64
}

type container struct {
	vmid    int
	name    string
	running bool
	nextPID int
	host    *SimHost
	initPID int // host pid of the container's init
}

type gpu struct {
	index int
	uuid  string
	name  string
	total int // MiB
	util  int
	hw    gpuHealth // what nvidia-smi reports of its health (hardware.go)
	// resets counts its successful resets (nvidia-smi --gpu-reset).
	resets int
}

type release struct {
	gpu int
	mib int
	at  time.Time
}

// proc is a simulated process. pid is its pid inside its container (0 on the node itself).
type proc struct {
	hostPID  int
	pid      int
	ct       *container
	ppid     int // in the process's own pid namespace
	hostPPID int
	state    byte // 'R', 'S', 'Z', 'D'
	stat     string
	args     []string
	cgroup   string      // path inside its namespace, e.g. /system.slice/x.service
	mem      map[int]int // gpu index -> MiB
	gpuFDs   bool        // holds /dev/nvidia* open (fuser sees it) even without memory
	daemon   bool        // a GPU daemon a careful operator never kills
	// leftover is a worker the orphans fault keeps alive through its unit's stop: it stays in
	// the unit's cgroup (as systemd leaves such a process) and the stop does not wait for it.
	leftover bool
	started  time.Time
	// onSignal handles a delivered signal; nil means the default action (TERM, KILL, INT, HUP,
	// QUIT end the process). Called with w.mu held.
	onSignal func(sig syscall.Signal)
	// onExit is called (w.mu held) after the process ended.
	onExit []func(code int, sig syscall.Signal)
	dead   bool
}

func (p *proc) comm() string {
	if len(p.args) == 0 {
		return ""
	}
	c := p.args[0]
	if i := strings.LastIndexByte(c, '/'); i >= 0 && !strings.Contains(c, "::") {
		c = c[i+1:]
	}
	if len(c) > 15 {
		c = c[:15]
	}
	return c
}

func (p *proc) heldMiB() int {
	n := 0
	for _, m := range p.mem {
		n += m
	}
	return n
}

type simTimer struct {
	t       *time.Timer
	stopped bool
}

func newWorld(scale float64, log *slog.Logger) *world {
	return &world{
		scale: scale, log: log, changed: make(chan struct{}), timers: map[*simTimer]struct{}{},
		procs: map[int]*proc{}, nextHostPID: 1000, containers: map[int]*container{}, releaseLag: 5 * time.Second,
	}
}

func (w *world) lock() { w.mu.Lock() }

// unlock releases mu, wakes waiters and runs the queued post actions.
func (w *world) unlock() {
	post := w.post
	w.post = nil
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	for _, f := range post {
		f()
	}
}

// later queues f to run after mu is released (mu must be held).
func (w *world) later(f func()) { w.post = append(w.post, f) }

// real converts a simulated duration into wall-clock time.
func (w *world) real(d time.Duration) time.Duration {
	if d >= 1<<62 {
		return d
	}
	return time.Duration(float64(d) / w.scale)
}

// after runs fn with mu held after the simulated duration d, unless stopped or the world closed.
// Must be called with mu held.
func (w *world) after(d time.Duration, fn func()) *simTimer {
	t := &simTimer{}
	if w.closed {
		t.stopped = true
		return t
	}
	w.timers[t] = struct{}{}
	t.t = time.AfterFunc(w.real(d), func() {
		w.lock()
		defer w.unlock()
		if w.closed || t.stopped {
			return
		}
		delete(w.timers, t)
		t.stopped = true
		fn()
	})
	return t
}

// stop cancels a timer (mu held). Safe on nil.
func (w *world) stopTimer(t *simTimer) {
	if t == nil || t.stopped {
		return
	}
	t.stopped = true
	if t.t != nil {
		t.t.Stop()
	}
	delete(w.timers, t)
}

// spawn creates a process (mu held). ct nil means a process of the node itself.
func (w *world) spawn(ct *container, parent *proc, args []string, cgroup string) *proc {
	w.nextHostPID += 1 + len(w.procs)%3
	p := &proc{hostPID: w.nextHostPID, ct: ct, state: 'S', stat: "Sl", args: append([]string(nil), args...), cgroup: cgroup, mem: map[int]int{}, started: time.Now()}
	if ct != nil {
		ct.nextPID += 1 + len(w.procs)%2
		p.pid = ct.nextPID
		p.ppid = 1
		p.hostPPID = ct.initPID
	} else {
		p.ppid = 1
		p.hostPPID = 1
	}
	if parent != nil {
		p.ppid, p.hostPPID = parent.pid, parent.hostPID
		if ct == nil {
			p.ppid = parent.hostPID
		}
	}
	w.procs[p.hostPID] = p
	return p
}

// nsPID is p's pid as seen from ct (nil = the node).
func (p *proc) nsPID(ct *container) int {
	if ct == nil {
		return p.hostPID
	}
	return p.pid
}

func (p *proc) nsPPID(ct *container) int {
	if ct == nil {
		return p.hostPPID
	}
	return p.ppid
}

// visible lists processes visible from ct (nil = node sees everything), sorted by pid.
func (w *world) visible(ct *container) []*proc {
	var out []*proc
	for _, p := range w.procs {
		if ct == nil || p.ct == ct {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].nsPID(ct) < out[j].nsPID(ct) })
	return out
}

func (w *world) lookup(ct *container, pid int) *proc {
	if ct == nil {
		return w.procs[pid]
	}
	for _, p := range w.procs {
		if p.ct == ct && p.pid == pid {
			return p
		}
	}
	return nil
}

// signal delivers sig to p (mu held). A process in D state ignores every signal.
func (w *world) signal(p *proc, sig syscall.Signal) {
	if p.dead || sig == 0 {
		return
	}
	if p.daemon && (sig == syscall.SIGKILL || sig == syscall.SIGTERM || sig == syscall.SIGINT) {
		w.killed = append(w.killed, w.info(p, nil))
	}
	if p.state == 'D' {
		return
	}
	if p.state == 'Z' {
		return
	}
	if sig == syscall.SIGKILL || p.onSignal == nil {
		switch sig {
		case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGABRT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM:
			w.exit(p, -1, sig)
		}
		return
	}
	p.onSignal(sig)
}

// exit ends p with an exit code (code >= 0) or a signal (mu held): its GPU memory is released
// after the lag, its children are reparented to init, its exit hooks run.
func (w *world) exit(p *proc, code int, sig syscall.Signal) {
	if p.dead {
		return
	}
	p.dead = true
	delete(w.procs, p.hostPID)
	now := time.Now()
	for g, m := range p.mem {
		if gg := w.gpuByIndex(g); m > 0 && gg != nil && gg.hw.strandNext {
			gg.hw.strandedMiB += m
			gg.hw.strandNext = false
			continue
		}
		if m > 0 {
			w.releases = append(w.releases, release{gpu: g, mib: m, at: now.Add(w.real(w.releaseLag))})
		}
	}
	p.mem = nil
	for _, c := range w.procs {
		if c.hostPPID == p.hostPID {
			c.ppid = 1
			if c.ct != nil {
				c.hostPPID = c.ct.initPID
			} else {
				c.hostPPID = 1
			}
		}
	}
	if lag := w.real(w.releaseLag); lag > 0 {
		// wake pollers when the memory is back (nvidia-smi reads it lazily anyway)
		w.after(w.releaseLag, func() {})
	}
	for _, f := range p.onExit {
		f(code, sig)
	}
	h := w.node
	if p.ct != nil {
		h = p.ct.host
	}
	if h != nil {
		h.sd.onProcExit(p)
	}
}

// used is the memory in use on GPU g (mu held): live holders plus not yet released memory.
func (w *world) used(g int) int {
	now := time.Now()
	n := 0
	keep := w.releases[:0]
	for _, r := range w.releases {
		if now.Before(r.at) {
			keep = append(keep, r)
			if r.gpu == g {
				n += r.mib
			}
		}
	}
	w.releases = keep
	for _, p := range w.procs {
		n += p.mem[g]
	}
	if gg := w.gpuByIndex(g); gg != nil {
		n += gg.hw.strandedMiB
	}
	return n
}

func (w *world) gpuByIndex(i int) *gpu {
	for _, g := range w.gpus {
		if g.index == i {
			return g
		}
	}
	return nil
}

func stateName(s byte) string {
	switch s {
	case 'R':
		return "R (running)"
	case 'D':
		return "D (disk sleep)"
	case 'Z':
		return "Z (zombie)"
	case 'T':
		return "T (stopped)"
	default:
		return "S (sleeping)"
	}
}

// cgroupPath is p's cgroup as seen from ct.
func (p *proc) cgroupFrom(ct *container) string {
	if ct == nil && p.ct != nil {
		return fmt.Sprintf("/lxc/%d/ns%s", p.ct.vmid, p.cgroup)
	}
	return p.cgroup
}
