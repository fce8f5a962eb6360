package gpu

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Process is a process that holds GPU memory or a GPU device file, as seen on
// the host Holders ran on (host PIDs on a Proxmox node).
type Process struct {
	PID, PPID int
	State     string // first letter of ps STAT: R S D Z T I; "" when ps no longer shows it
	Stat      string // the whole STAT, e.g. "Sl", "Dl"
	Cmdline   string // full command line (ps args), e.g. "sglang::scheduler_TP0"
	Cgroup    string // e.g. "/lxc/129/ns/system.slice/sglang-qwen.service" ("" when unknown)
	UsedMiB   int    // GPU memory nvidia-smi counts for it (summed over GPUs; 0 when it only holds a device file, -1 when [N/A])
	Compute   bool   // listed by nvidia-smi as a compute app
	Engine    bool   // an inference engine process (see IsEngine); never true for a Daemon
	Daemon    bool   // a GPU daemon (see IsDaemon): never killed
	// GPUs are the GPUs it holds: memory nvidia-smi counts for it there, or the
	// GPU's device file (/dev/nvidiaN) open. A process that holds only
	// /dev/nvidiactl or /dev/nvidia-uvm has none: which GPU it uses cannot be told.
	GPUs []HeldGPU
}

// HeldGPU is one GPU a process holds, as seen on the host Holders ran on.
type HeldGPU struct {
	Index   int    // the GPU's index on that host (the device file's minor number)
	UUID    string // "" when nvidia-smi did not report it
	UsedMiB int    // memory held there; 0 when only the device file is open, -1 when [N/A]
}

// OnGPU reports whether p holds the GPU with the given UUID or, when either
// UUID is unknown, the given index on the host Holders ran on.
func (p Process) OnGPU(uuid string, index int) bool {
	for _, g := range p.GPUs {
		if uuid != "" && g.UUID != "" {
			if g.UUID == uuid {
				return true
			}
		} else if g.Index == index {
			return true
		}
	}
	return false
}

func (p *Process) addGPU(g HeldGPU) {
	for i := range p.GPUs {
		if p.GPUs[i].Index == g.Index && (p.GPUs[i].UUID == g.UUID || g.UUID == "" || p.GPUs[i].UUID == "") {
			if g.UsedMiB != 0 {
				p.GPUs[i].UsedMiB = g.UsedMiB
			}
			return
		}
	}
	p.GPUs = append(p.GPUs, g)
	sort.Slice(p.GPUs, func(i, j int) bool { return p.GPUs[i].Index < p.GPUs[j].Index })
}

var engineMarks = []string{"sglang::", "sglang.launch_server", "VLLM::", "vllm.entrypoints"}

// IsEngine reports whether a full command line is an inference engine's:
// SGLang (sglang::* process titles, python -m sglang.launch_server) or vLLM
// (VLLM::* titles, `vllm serve`, python -m vllm.entrypoints...). Match the full
// command line, never /proc/PID/comm, which is cut to 15 characters.
func IsEngine(cmdline string) bool {
	if IsDaemon(cmdline) {
		return false
	}
	for _, m := range engineMarks {
		if strings.Contains(cmdline, m) {
			return true
		}
	}
	f := strings.Fields(cmdline)
	for i := 0; i+1 < len(f); i++ {
		if base(f[i]) == "vllm" && f[i+1] == "serve" {
			return true
		}
	}
	return false
}

var daemonNames = map[string]bool{"nvidia-persistenced": true, "nv-hostengine": true, "xorg": true, "x": true, "xwayland": true}

// IsDaemon reports the GPU daemons that `fuser -k /dev/nvidia*` would also
// kill and that must never be: nvidia-persistenced, DCGM (nv-hostengine,
// dcgm-exporter, ...), Xorg. It looks at the program (the first word).
func IsDaemon(cmdline string) bool {
	f := strings.Fields(cmdline)
	if len(f) == 0 {
		return false
	}
	prog := strings.ToLower(base(f[0]))
	return daemonNames[prog] || strings.Contains(prog, "dcgm")
}

func base(w string) string {
	if i := strings.LastIndexByte(w, '/'); i >= 0 {
		return w[i+1:]
	}
	return w
}

// deviceName matches the /dev entries a CUDA process holds open.
var deviceName = regexp.MustCompile(`^nvidia([0-9]+|ctl|-uvm|-uvm-tools)$`)

// deviceMinor is N of /dev/nvidiaN: the GPU's index on that host.
func deviceMinor(dev string) (int, bool) {
	n, ok := strings.CutPrefix(dev, "/dev/nvidia")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i >= 0
}

// fallbackDevices are used when /dev cannot be listed: every CUDA process
// holds /dev/nvidiactl open.
var fallbackDevices = []string{"/dev/nvidiactl", "/dev/nvidia-uvm"}

// devices lists the NVIDIA device files on r (there is no shell to glob
// /dev/nvidia*).
func devices(ctx context.Context, r Runner) ([]string, error) {
	out, err := r.Run(ctx, nil, "ls", "/dev")
	if err != nil {
		return nil, fmt.Errorf("list /dev: %w", err)
	}
	if out.ExitStatus != 0 {
		return fallbackDevices, nil
	}
	var devs []string
	for _, name := range strings.Fields(string(out.Stdout)) {
		if deviceName.MatchString(name) {
			devs = append(devs, "/dev/"+name)
		}
	}
	if len(devs) == 0 {
		return fallbackDevices, nil
	}
	sort.Strings(devs)
	return devs, nil
}

// ParseFuser reads the PIDs psmisc's fuser prints on stdout (" 4242 4243");
// the file names and access letters go to stderr, but a trailing access letter
// ("4242m") is tolerated. Anything else is a *ParseError.
func ParseFuser(out []byte) ([]int, error) {
	var pids []int
	for _, w := range strings.Fields(string(out)) {
		w = strings.TrimRight(w, "cefFrm")
		n, err := strconv.Atoi(w)
		if err != nil || n <= 0 {
			return nil, &ParseError{What: "fuser", Line: 1, Text: w, Msg: "not a PID"}
		}
		pids = append(pids, n)
	}
	return pids, nil
}

// fuserPIDs runs `fuser DEVICE...`. Exit 1 with no PIDs means none. A host
// without fuser (exit 127) gives no PIDs and no error: the compute apps still
// name the holders of memory.
func fuserPIDs(ctx context.Context, r Runner, devs []string) ([]int, error) {
	argv := append([]string{"fuser"}, devs...)
	out, err := r.Run(ctx, nil, argv...)
	if err != nil {
		return nil, fmt.Errorf("fuser the GPU devices: %w", err)
	}
	switch {
	case out.ExitStatus == 127:
		return nil, nil
	case out.Signal != "" || out.ExitStatus > 1:
		return nil, fmt.Errorf("fuser the GPU devices: %w", commandError(argv, out))
	}
	pids, err := ParseFuser(out.Stdout)
	if err != nil {
		return nil, fmt.Errorf("fuser the GPU devices: %w", err)
	}
	return pids, nil
}

// PSRow is one line of `ps -o pid=,ppid=,stat=,args=`.
type PSRow struct {
	PID, PPID int
	Stat      string
	Args      string
}

// cutField splits the first space-separated field off s.
func cutField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t")
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// ParsePS parses `ps -o pid=,ppid=,stat=,args=` (ncols 4) or
// `ps -o pid=,stat=` (ncols 2) output; args keeps its inner spacing.
func ParsePS(out []byte, ncols int) ([]PSRow, error) {
	var rows []PSRow
	err := lines(out, func(n int, line string) error {
		bad := func(msg string) error { return &ParseError{What: "ps", Line: n, Text: line, Msg: msg} }
		var r PSRow
		f, rest := cutField(line)
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return bad("PID is not a positive number")
		}
		r.PID = pid
		if ncols == 4 {
			f, rest = cutField(rest)
			ppid, err := strconv.Atoi(f)
			if err != nil || ppid < 0 {
				return bad("PPID is not a number")
			}
			r.PPID = ppid
		}
		r.Stat, rest = cutField(rest)
		if r.Stat == "" || !strings.ContainsRune("RSDZTtWXIP", rune(r.Stat[0])) {
			return bad("STAT is not a process state")
		}
		if ncols == 4 {
			r.Args = strings.TrimSpace(rest)
		} else if strings.TrimSpace(rest) != "" {
			return bad("want PID STAT")
		}
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func pidList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// ps runs `ps -o COLS -p PIDS`; exit 1 with no output means none of them exists.
func ps(ctx context.Context, r Runner, cols string, ncols int, pids []int) ([]PSRow, error) {
	argv := []string{"ps", "-o", cols, "-p", pidList(pids)}
	out, err := r.Run(ctx, nil, argv...)
	if err != nil {
		return nil, fmt.Errorf("ps: %w", err)
	}
	if out.Signal != "" || out.ExitStatus > 1 || out.ExitStatus == 1 && len(strings.TrimSpace(string(out.Stdout))) == 0 && len(strings.TrimSpace(string(out.Stderr))) > 0 {
		return nil, fmt.Errorf("ps: %w", commandError(argv, out))
	}
	return ParsePS(out.Stdout, ncols)
}

// cgroups reads `ps -o pid=,cgroup= -p PIDS`: cgroup v2 "0::/path" becomes
// "/path"; "-" (none) is left out.
func cgroups(ctx context.Context, r Runner, pids []int) map[int]string {
	out, err := r.Run(ctx, nil, "ps", "-o", "pid=,cgroup=", "-p", pidList(pids))
	m := map[int]string{}
	if err != nil || out.ExitStatus > 1 {
		return m
	}
	_ = lines(out.Stdout, func(_ int, line string) error {
		f, rest := cutField(line)
		pid, err := strconv.Atoi(f)
		cg := strings.TrimSpace(rest)
		if err != nil || cg == "" || cg == "-" {
			return nil
		}
		m[pid] = strings.TrimPrefix(cg, "0::")
		return nil
	})
	return m
}

// Holders lists who holds GPU memory or a GPU device on r: the compute apps
// of nvidia-smi plus `fuser` on each /dev/nvidia* file, each with the GPUs it
// holds (joined on UUID with nvidia-smi's GPU list; a device file's minor is the
// GPU's index there), its command line, state and cgroup from ps, classified
// Engine or Daemon. Run it on the host whose PIDs nvidia-smi reports (the
// Proxmox node for a container). Sorted by PID. A PID that exited between the
// listings is left out, unless nvidia-smi still counts memory for it (then it
// is listed with an empty Cmdline and State).
func Holders(ctx context.Context, r Runner) ([]Process, error) {
	gs, err := Query(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("find GPU holders: %w", err)
	}
	byUUID, byIndex := map[string]int{}, map[int]string{}
	for _, g := range gs {
		if g.UUID != "" {
			byUUID[g.UUID] = g.Index
		}
		byIndex[g.Index] = g.UUID
	}
	apps, err := ComputeApps(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("find GPU holders: %w", err)
	}
	devs, err := devices(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("find GPU holders: %w", err)
	}
	byPID := map[int]*Process{}
	for _, a := range apps {
		p := byPID[a.PID]
		if p == nil {
			p = &Process{PID: a.PID, Compute: true}
			byPID[a.PID] = p
		}
		switch {
		case a.UsedMiB < 0 && p.UsedMiB == 0:
			p.UsedMiB = -1
		case a.UsedMiB >= 0:
			p.UsedMiB = max(p.UsedMiB, 0) + a.UsedMiB
		}
		if i, ok := byUUID[a.GPUUUID]; ok {
			p.addGPU(HeldGPU{Index: i, UUID: a.GPUUUID, UsedMiB: a.UsedMiB})
		}
	}
	// One fuser per device file: its PIDs come on stdout and the file names on
	// stderr, so one call for all files could not tell who holds which.
	for _, dev := range devs {
		fpids, err := fuserPIDs(ctx, r, []string{dev})
		if err != nil {
			return nil, fmt.Errorf("find GPU holders: %w", err)
		}
		minor, numbered := deviceMinor(dev)
		for _, pid := range fpids {
			p := byPID[pid]
			if p == nil {
				p = &Process{PID: pid}
				byPID[pid] = p
			}
			if numbered {
				p.addGPU(HeldGPU{Index: minor, UUID: byIndex[minor]})
			}
		}
	}
	if len(byPID) == 0 {
		return nil, nil
	}
	pids := make([]int, 0, len(byPID))
	for pid := range byPID {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	rows, err := ps(ctx, r, "pid=,ppid=,stat=,args=", 4, pids)
	if err != nil {
		return nil, fmt.Errorf("find GPU holders: %w", err)
	}
	seen := map[int]bool{}
	for _, row := range rows {
		p := byPID[row.PID]
		if p == nil {
			continue
		}
		seen[row.PID] = true
		p.PPID, p.Stat, p.State, p.Cmdline = row.PPID, row.Stat, row.Stat[:1], row.Args
		p.Daemon = IsDaemon(p.Cmdline)
		p.Engine = IsEngine(p.Cmdline)
	}
	cgs := cgroups(ctx, r, pids)
	var procs []Process
	for _, pid := range pids {
		p := byPID[pid]
		if !seen[pid] && !(p.Compute && p.UsedMiB != 0) {
			continue
		}
		p.Cgroup = cgs[pid]
		procs = append(procs, *p)
	}
	return procs, nil
}
