package lab

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault is a failure the lab injects, chosen by name.
//
//	orphans         on stop, the engine's scheduler workers survive, reparented to pid 1, keeping
//	                their GPU memory (the incident's restart loop); like the left-over processes
//	                of a KillMode=process unit they stay in the unit's cgroup, and the stop ends
//	                without them
//	dstate          on stop, scheduler_TP0 enters D state: no signal kills it, it keeps its memory
//	slow-load=DUR   the engine's model load takes DUR longer than Options.LoadTime (simulated
//	                time, scaled like all lab time: slow-load=5m adds 12 s at the default x25)
//	slow-engine=F   the engines decode F times slower than the default physics (F > 1; a
//	                regression to detect); Lab.SlowEngine changes it while the lab runs
//	crash-on-start  the engine crashes at start with a Python traceback whenever its ExecStart argv
//	                differs from the one the lab was seeded with (a rollback starts fine)
//	ssh-drop        the next systemctl start/stop/restart drops the SSH connection after the
//	                action took effect (once)
//	ssh-drop=upload the next file written over sftp into a unit directory drops the connection
//	                once the file is created, before its content is written (once)
//	ssh-drop=write  the next rename over sftp into a unit directory (the atomic replace of a
//	                unit) drops the connection after the rename took effect (once)
//	ssh-drop=reload the next systemctl daemon-reload drops the connection after systemd
//	                reloaded (once)
//	restart-loop=DUR DUR after the lab started (lab time, scaled like slow-load), the default
//	                service (qwen) is restarted behind opsbot's back, as a person would with
//	                `systemctl restart`, while its workers are busy in CUDA teardown: they
//	                survive the stop holding their GPU memory and the unit falls into the
//	                incident's restart loop, outside any job of opsbot (once; see
//	                Lab.RestartLeavingWorkers)
//	no-forwarding   the hosts' SSH servers refuse every direct-tcpip channel as sshd does with
//	                AllowTcpForwarding no (administratively prohibited): a service reached
//	                through SSH (via_ssh) cannot be reached
//	xid=N@G         at start, node GPU G fails as the driver reports XID N: the kernel log line
//	                and the state that goes with it (Lab.InjectXID; 48 and 95 an uncorrected
//	                ECC error, 63 a pending row remap, 79 off the bus)
//	remap-pending=G GPU G has a row marked for remapping (XID 63), pending until a reset
//	pcie-degraded=G GPU G's PCIe link trained at gen 4 x8 of gen 5 x16
//	thermal=G       GPU G runs at 92 C with its clocks slowed by thermal slowdown
//	stuck-memory=G  the memory of the next process on GPU G to exit stays held by no
//	                process until the GPU is reset (nvidia-smi --gpu-reset)
//	persistence-held=G nvidia-persistenced does not give GPU G up per GPU: `nvidia-smi -pm 0
//	                -i G` is refused, so its reset stays refused while persistence mode holds the
//	                device, until nvidia-persistenced is stopped (gpureset.go)
//	xid-after-reset=N@G right after its next reset, GPU G fails again as the driver reports
//	                XID N (failing hardware a reset does not cure: the reset's check sees a new Xid)
type Fault struct {
	Name     string
	Duration time.Duration // slow-load and restart-loop only
	Factor   float64       // slow-engine only
	GPU      int           // the GPU faults' node GPU index
	XID      int           // xid only
	// Stage is where ssh-drop drops the connection: "" (systemctl start/stop/restart),
	// "upload", "write" or "reload".
	Stage string
}

func (f Fault) String() string {
	switch {
	case f.Name == "slow-load" || f.Name == "restart-loop":
		return f.Name + "=" + f.Duration.String()
	case f.Name == "slow-engine":
		return "slow-engine=" + strconv.FormatFloat(f.Factor, 'g', -1, 64)
	case f.Stage != "":
		return f.Name + "=" + f.Stage
	case f.Name == "xid":
		return fmt.Sprintf("xid=%d@%d", f.XID, f.GPU)
	case gpuFaults[f.Name]:
		return fmt.Sprintf("%s=%d", f.Name, f.GPU)
	}
	return f.Name
}

// gpuFaults are the faults of one node GPU, given by its index.
var gpuFaults = map[string]bool{"xid": true, "remap-pending": true, "pcie-degraded": true, "thermal": true, "stuck-memory": true, "persistence-held": true,
	"xid-after-reset": true}

// sshDropStages are the values ssh-drop takes.
var sshDropStages = []string{"upload", "write", "reload"}

// FaultError reports a fault list that cannot be parsed.
type FaultError struct {
	Item    string
	Problem string
}

func (e *FaultError) Error() string {
	return fmt.Sprintf("fault %q: %s (known: orphans, dstate, slow-load=DUR, slow-engine=F, crash-on-start, ssh-drop[=upload|write|reload], no-forwarding, restart-loop=DUR, xid=N@GPU, remap-pending=GPU, pcie-degraded=GPU, thermal=GPU, stuck-memory=GPU, persistence-held=GPU, xid-after-reset=N@GPU)", e.Item, e.Problem)
}

// FaultDocs name every fault ParseFaults takes, as written, with what it
// does: for the --lab-faults and --faults help.
var FaultDocs = [][2]string{
	{"orphans", "engine workers outlive a stop holding GPU memory (the incident)"},
	{"dstate", "a worker no signal kills"},
	{"slow-load=DUR", "the model load takes DUR longer"},
	{"crash-on-start", "the engine crashes with any changed command line"},
	{"slow-engine=F", "the engines decode F times slower (a regression)"},
	{"ssh-drop[=upload|write|reload]", "the SSH connection drops at the next systemctl start/stop (or at that unit write stage)"},
	{"no-forwarding", "the hosts' sshd refuse TCP forwarding (a via_ssh service is unreachable)"},
	{"restart-loop=DUR", "DUR after start, qwen is restarted behind opsbot's back and loops (for the watchdog)"},
	{"xid=N@G", "node GPU G fails as the driver reports XID N (the kernel log line and its state)"},
	{"remap-pending=G", "GPU G has a row marked for remapping (XID 63), pending until a reset"},
	{"pcie-degraded=G", "GPU G's PCIe link trained at gen 4 x8 of gen 5 x16"},
	{"thermal=G", "GPU G runs at 92 C, slowed by thermal slowdown"},
	{"stuck-memory=G", "the next process on GPU G to exit leaves its memory held by no process until a reset"},
	{"persistence-held=G", "nvidia-persistenced does not give GPU G up per GPU: `nvidia-smi -pm 0 -i G` is refused"},
	{"xid-after-reset=N@G", "right after its next reset, GPU G reports XID N again (hardware a reset does not cure)"},
}

// FaultHelp is FaultDocs as flag help: lead, then one fault a line.
func FaultHelp(lead string) string {
	var b strings.Builder
	b.WriteString(lead)
	for _, d := range FaultDocs {
		fmt.Fprintf(&b, "\n  %s: %s", d[0], d[1])
	}
	return b.String()
}

// ParseFaults parses a comma separated fault list such as "orphans,slow-load=3m". Blank input is
// no faults. Unknown names, duplicates, a missing or invalid duration, or a value given to a
// fault that takes none are a *FaultError.
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, hasVal := strings.Cut(item, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		f := Fault{Name: name}
		switch name {
		case "orphans", "dstate", "crash-on-start", "no-forwarding":
			if hasVal {
				return nil, &FaultError{Item: item, Problem: "takes no value"}
			}
		case "ssh-drop":
			if hasVal {
				f.Stage = strings.ToLower(strings.TrimSpace(val))
				if !slices.Contains(sshDropStages, f.Stage) {
					return nil, &FaultError{Item: item, Problem: "drops at upload, write or reload (or, without a value, at systemctl start/stop)"}
				}
			}
		case "slow-load", "restart-loop":
			if !hasVal {
				return nil, &FaultError{Item: item, Problem: "needs a duration, e.g. " + name + "=5m"}
			}
			d, err := time.ParseDuration(strings.TrimSpace(val))
			if err != nil || d <= 0 {
				return nil, &FaultError{Item: item, Problem: "invalid duration " + fmt.Sprintf("%q", val)}
			}
			f.Duration = d
		case "slow-engine":
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if !hasVal || err != nil || !(v > 1 && v <= 100) {
				return nil, &FaultError{Item: item, Problem: "needs a factor above 1 (at most 100), e.g. slow-engine=1.5"}
			}
			f.Factor = v
		case "xid", "remap-pending", "pcie-degraded", "thermal", "stuck-memory", "persistence-held", "xid-after-reset":
			if !hasVal {
				return nil, &FaultError{Item: item, Problem: "needs a GPU, e.g. " + map[bool]string{true: name + "=79@2", false: name + "=2"}[xidFault(name)]}
			}
			if prob := parseGPUFault(&f, val); prob != "" {
				return nil, &FaultError{Item: item, Problem: prob}
			}
		default:
			names := make([]string, len(FaultDocs))
			for i, d := range FaultDocs {
				names[i] = d[0]
			}
			return nil, &FaultError{Item: item, Problem: "unknown fault (the faults: " + strings.Join(names, ", ") + ")"}
		}
		key := name
		if gpuFaults[name] { // one per GPU (per XID and GPU)
			key = f.String()
		}
		if seen[key] {
			return nil, &FaultError{Item: item, Problem: "given twice"}
		}
		seen[key] = true
		out = append(out, f)
	}
	return out, nil
}

type faultSet struct {
	orphans, dstate, crashOnStart bool
	noForwarding                  bool // read under world.mu
	slowLoad                      time.Duration
	restartLoop                   time.Duration // 0: no restart-loop fault
	slowEngine                    float64
	sshDropArmed                  bool       // guarded by world.mu
	sshDropStage                  string     // guarded by world.mu; "" once fired
	hold                          *WriteHold // guarded by world.mu; nil once reached
}

// takeDrop reports whether the ssh-drop fault armed for stage fires now, and
// disarms it when it does. Callers hold world.mu.
func (s *faultSet) takeDrop(stage string) bool {
	if s.sshDropStage != stage {
		return false
	}
	s.sshDropStage = ""
	return true
}

// unitDirs are where systemd reads units from; faults on file writes apply there.
var unitDirs = []string{"/etc/systemd/system/", "/run/systemd/system/", "/lib/systemd/system/", "/usr/lib/systemd/system/"}

func inUnitDir(p string) bool {
	p = path.Clean("/" + p)
	for _, d := range unitDirs {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

// WriteHold stalls the next rename over sftp into a unit directory (the
// atomic replace of a unit: the temporary file is written, the unit is not
// yet replaced) until Release, so that a test can act inside that window
// deterministically, e.g. kill the process that writes.
type WriteHold struct {
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

// SlowEngine makes every engine started from now on (on any of the lab's
// hosts) slower: its verify steps take factor times as long as the default
// physics says, so its throughput falls to about 1/factor; an engine already
// serving keeps its speed until it restarts. factor <= 1 restores the
// default physics. It is the knob a test turns to make a service regress.
func (l *Lab) SlowEngine(factor float64) {
	l.w.lock()
	l.w.slowdown = factor
	l.w.unlock()
}

// RefuseForwarding turns the no-forwarding fault on or off while the lab
// runs: on, every host's SSH server refuses direct-tcpip channels as sshd
// with AllowTcpForwarding no does; channels already open stay open.
func (l *Lab) RefuseForwarding(on bool) {
	l.w.lock()
	l.faults.noForwarding = on
	l.w.unlock()
}

// HoldUnitWrite arms a WriteHold for the next rename into a unit directory on
// any of the lab's hosts. Release it (a test's cleanup, at the latest) or that
// host's SSH server cannot finish closing.
func (l *Lab) HoldUnitWrite() *WriteHold {
	h := &WriteHold{reached: make(chan struct{}), release: make(chan struct{})}
	l.w.lock()
	l.faults.hold = h
	l.w.unlock()
	return h
}

// Reached is closed when a rename is held.
func (h *WriteHold) Reached() <-chan struct{} { return h.reached }

// Release lets the held rename go ahead. It is safe to call more than once.
func (h *WriteHold) Release() { h.once.Do(func() { close(h.release) }) }

// takeHold returns the armed hold, disarmed, or nil. Callers hold world.mu.
func (s *faultSet) takeHold() *WriteHold {
	h := s.hold
	s.hold = nil
	return h
}

func newFaultSet(fs []Fault) faultSet {
	var s faultSet
	for _, f := range fs {
		switch f.Name {
		case "orphans":
			s.orphans = true
		case "dstate":
			s.dstate = true
		case "crash-on-start":
			s.crashOnStart = true
		case "no-forwarding":
			s.noForwarding = true
		case "slow-load":
			s.slowLoad = f.Duration
		case "restart-loop":
			s.restartLoop = f.Duration
		case "slow-engine":
			s.slowEngine = f.Factor
		case "ssh-drop":
			if f.Stage == "" {
				s.sshDropArmed = true
			} else {
				s.sshDropStage = f.Stage
			}
		}
	}
	return s
}
