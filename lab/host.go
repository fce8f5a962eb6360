package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// SimHost is one simulated host: the Proxmox node or a container. Its methods are for tests and
// the demo: they inspect and change simulated state directly, without SSH. Safe for concurrent use.
type SimHost struct {
	lab     *Lab
	w       *world
	name    string
	ct      *container // nil on the node
	root    string     // host file system root on the real disk
	sd      *systemd
	journal *journal
	hostKey ssh.Signer
	srv     *sshServer

	forwards atomic.Int64 // direct-tcpip channels opened (Forwarded)
}

// Name is the host's name ("gpu1", "pve").
func (h *SimHost) Name() string { return h.name }

// Addr is the host's SSH address (127.0.0.1:PORT), "" before its server started.
func (h *SimHost) Addr() string {
	if h.srv == nil {
		return ""
	}
	return h.srv.ln.Addr().String()
}

// HostKey is the host's SSH public key.
func (h *SimHost) HostKey() ssh.PublicKey { return h.hostKey.PublicKey() }

// realPath maps a simulated absolute path onto the host's root directory.
func (h *SimHost) realPath(p string) string {
	return filepath.Join(h.root, filepath.FromSlash(path.Clean("/"+p)))
}

// ReadFile reads a file of the host's file system (not /proc).
func (h *SimHost) ReadFile(p string) ([]byte, error) {
	b, err := os.ReadFile(h.realPath(p))
	if err != nil {
		return nil, fmt.Errorf("read %s on %s: %w", p, h.name, unwrapPath(err))
	}
	return b, nil
}

// ReadDir lists the names in a directory of the host's file system, sorted.
func (h *SimHost) ReadDir(p string) ([]string, error) {
	ents, err := os.ReadDir(h.realPath(p))
	if err != nil {
		return nil, fmt.Errorf("read directory %s on %s: %w", p, h.name, unwrapPath(err))
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// WriteFile writes a file of the host's file system (creating parent directories) atomically.
func (h *SimHost) WriteFile(p string, data []byte) error {
	rp := h.realPath(p)
	if err := os.MkdirAll(filepath.Dir(rp), 0o755); err != nil {
		return fmt.Errorf("write %s on %s: %w", p, h.name, unwrapPath(err))
	}
	tmp := rp + ".lab-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s on %s: %w", p, h.name, unwrapPath(err))
	}
	if err := os.Rename(tmp, rp); err != nil {
		return fmt.Errorf("write %s on %s: %w", p, h.name, unwrapPath(err))
	}
	return nil
}

// Symlink makes link, on the host's file system, a symbolic link to target
// (creating link's parent directories), as `ln -s TARGET LINK` would. target
// is relative and without "..": it resolves beside link, inside the host's
// file system (an absolute one, or one climbing out, could name a path of
// the real disk, outside the lab).
func (h *SimHost) Symlink(target, link string) error {
	if path.IsAbs(target) || strings.Contains("/"+target+"/", "/../") {
		return fmt.Errorf("symlink %s on %s: give a relative target without .., not %s", link, h.name, target)
	}
	rp := h.realPath(link)
	if err := os.MkdirAll(filepath.Dir(rp), 0o755); err != nil {
		return fmt.Errorf("symlink %s on %s: %w", link, h.name, unwrapPath(err))
	}
	if err := os.Symlink(filepath.FromSlash(target), rp); err != nil {
		return fmt.Errorf("symlink %s on %s: %w", link, h.name, unwrapPath(err))
	}
	return nil
}

// Lstat describes p on the host's file system, a symbolic link itself
// rather than what it points to.
func (h *SimHost) Lstat(p string) (fs.FileInfo, error) {
	fi, err := os.Lstat(h.realPath(p))
	if err != nil {
		return nil, fmt.Errorf("lstat %s on %s: %w", p, h.name, unwrapPath(err))
	}
	return fi, nil
}

// unwrapPath drops the real path from *fs.PathError so messages show only simulated paths.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// GPUInfo is one GPU's memory as nvidia-smi would report it.
type GPUInfo struct {
	Index    int
	UUID     string
	Name     string
	UsedMiB  int
	TotalMiB int
}

// GPUs reports every GPU's memory now.
func (h *SimHost) GPUs() []GPUInfo {
	w := h.w
	w.lock()
	defer w.unlock()
	var out []GPUInfo
	for _, g := range w.gpus {
		out = append(out, GPUInfo{Index: g.index, UUID: g.uuid, Name: g.name, UsedMiB: w.used(g.index), TotalMiB: g.total})
	}
	return out
}

// ProcInfo describes one simulated process.
type ProcInfo struct {
	PID     int    // in the host's namespace (container pid on gpu1, host pid on pve)
	HostPID int    // on the Proxmox node
	PPID    int    // in the host's namespace
	State   string // "R", "S", "Z", "D"
	Args    []string
	Cgroup  string
	GPUMiB  map[int]int // GPU index -> MiB held
}

func (w *world) info(p *proc, ct *container) ProcInfo {
	m := map[int]int{}
	for g, v := range p.mem {
		m[g] = v
	}
	return ProcInfo{PID: p.nsPID(ct), HostPID: p.hostPID, PPID: p.nsPPID(ct), State: string(p.state), Args: append([]string(nil), p.args...), Cgroup: p.cgroupFrom(ct), GPUMiB: m}
}

// Processes lists the processes visible on this host, by pid.
func (h *SimHost) Processes() []ProcInfo {
	w := h.w
	w.lock()
	defer w.unlock()
	var out []ProcInfo
	for _, p := range w.visible(h.ct) {
		out = append(out, w.info(p, h.ct))
	}
	return out
}

// KilledDaemons lists the GPU daemons (nvidia-persistenced, nv-hostengine) that received a
// killing signal since the lab started: a careful ops layer never kills them.
func (h *SimHost) KilledDaemons() []ProcInfo {
	w := h.w
	w.lock()
	defer w.unlock()
	return append([]ProcInfo(nil), w.killed...)
}

// HoldGPU starts a process on this host that holds mib MiB on GPU gpu (a stray holder for tests),
// in an interactive session's cgroup.
func (h *SimHost) HoldGPU(gpuIndex, mib int, args ...string) (ProcInfo, error) {
	return h.HoldGPUIn("/user.slice/user-0.slice/session-1.scope", gpuIndex, mib, args...)
}

// HoldGPUIn is HoldGPU with the process in cgroup (as seen from this host, e.g.
// "/system.slice/other.service"): a foreign holder of another unit for tests. With mib 0 the
// process holds only the GPU's device file, no memory.
func (h *SimHost) HoldGPUIn(cgroup string, gpuIndex, mib int, args ...string) (ProcInfo, error) {
	w := h.w
	w.lock()
	defer w.unlock()
	g := w.gpuByIndex(gpuIndex)
	if g == nil {
		return ProcInfo{}, fmt.Errorf("hold GPU %d on %s: no such GPU", gpuIndex, h.name)
	}
	if len(args) == 0 {
		args = []string{"python3", "stray.py"}
	}
	if !strings.HasPrefix(cgroup, "/") {
		return ProcInfo{}, fmt.Errorf("hold GPU %d on %s: cgroup %q is not absolute", gpuIndex, h.name, cgroup)
	}
	p := w.spawn(h.ct, nil, args, cgroup)
	p.mem[gpuIndex] = mib
	p.gpuFDs = true
	return w.info(p, h.ct), nil
}

// UnitStatus is a unit's state as systemd sees it, plus the lab's view of its engine.
type UnitStatus struct {
	LoadState, ActiveState, SubState, Result string
	NRestarts, MainPID                       int
	NeedDaemonReload                         bool
	Port                                     int  // the lab port its engine listens on (0: none yet)
	Ready                                    bool // its engine answers /health 200
	Listening                                bool // its engine's port accepts connections
}

// Unit reports a unit's state (LoadState not-found for an unknown unit).
func (h *SimHost) Unit(name string) UnitStatus {
	d := h.readDiskUnit(name)
	w := h.w
	w.lock()
	defer w.unlock()
	return h.unitStatus(d)
}

func (h *SimHost) unitStatus(d diskUnit) UnitStatus {
	u := h.sd.refresh(h.sd.units[d.name], d)
	if u == nil {
		return UnitStatus{LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}
	}
	s := UnitStatus{LoadState: u.loadState(), ActiveState: u.active, SubState: u.sub, Result: u.result, NRestarts: u.nRestarts, Port: u.port,
		NeedDaemonReload: u.needReload(d)}
	if u.main != nil {
		s.MainPID = u.main.nsPID(h.ct)
	}
	if u.run != nil {
		s.Ready, s.Listening = u.run.ready, u.run.ln != nil
	}
	return s
}

// WaitUnit waits until cond holds for the unit's status, or ctx ends (ctx.Err() wrapped).
func (h *SimHost) WaitUnit(ctx context.Context, name string, cond func(UnitStatus) bool) error {
	tick := time.NewTicker(50 * time.Millisecond) // file-system changes are not signalled
	defer tick.Stop()
	for {
		d := h.readDiskUnit(name)
		h.w.lock()
		s := h.unitStatus(d)
		ch := h.w.changed
		h.w.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s on %s (now %s/%s, NRestarts=%d): %w", name, h.name, s.ActiveState, s.SubState, s.NRestarts, ctx.Err())
		case <-ch:
		case <-tick.C:
		}
	}
}

// Journal returns the messages of a unit's journal, oldest first.
func (h *SimHost) Journal(unitName string) []string {
	var out []string
	for _, e := range h.journal.query(unitName, time.Time{}, -1) {
		out = append(out, e.Msg)
	}
	return out
}

// Units lists the units systemd has loaded.
func (h *SimHost) Units() []string {
	h.w.lock()
	defer h.w.unlock()
	var out []string
	for n := range h.sd.units {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
