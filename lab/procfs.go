package lab

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// readAny reads a file of the host: /proc and /sys/fs/cgroup are synthesized from the process
// table, everything else comes from the host's file system.
func (h *SimHost) readAny(p string) ([]byte, error) {
	p = path.Clean("/" + p)
	if b, ok, err := h.readVirtual(p); ok {
		return b, err
	}
	rp := h.realPath(p)
	st, err := os.Stat(rp)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, errIsDir
	}
	return os.ReadFile(rp)
}

type virtInfo struct {
	name string
	dir  bool
	size int64
}

func (v virtInfo) Name() string { return v.name }
func (v virtInfo) Size() int64  { return v.size }
func (v virtInfo) Mode() fs.FileMode {
	if v.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (v virtInfo) ModTime() time.Time { return time.Time{} }
func (v virtInfo) IsDir() bool        { return v.dir }
func (v virtInfo) Sys() any           { return nil }

// statAny stats a path, /proc and /sys/fs/cgroup included.
func (h *SimHost) statAny(p string) (fs.FileInfo, error) {
	p = path.Clean("/" + p)
	if p == "/proc" || p == "/sys/fs/cgroup" {
		return virtInfo{name: path.Base(p), dir: true}, nil
	}
	if strings.HasPrefix(p, "/proc/") {
		rest := strings.Split(strings.TrimPrefix(p, "/proc/"), "/")
		if len(rest) == 1 {
			if pid, err := strconv.Atoi(rest[0]); err == nil && h.procExists(pid) {
				return virtInfo{name: rest[0], dir: true}, nil
			}
			return nil, os.ErrNotExist
		}
	}
	if strings.HasPrefix(p, "/sys/fs/cgroup/") {
		cg := strings.TrimPrefix(p, "/sys/fs/cgroup")
		if strings.HasSuffix(cg, "/cgroup.procs") {
			if _, ok, err := h.readVirtual(p); ok && err == nil {
				return virtInfo{name: "cgroup.procs"}, nil
			}
			return nil, os.ErrNotExist
		}
		if len(h.cgroupPIDs(cg)) > 0 {
			return virtInfo{name: path.Base(cg), dir: true}, nil
		}
		return nil, os.ErrNotExist
	}
	if b, ok, err := h.readVirtual(p); ok {
		if err != nil {
			return nil, err
		}
		return virtInfo{name: path.Base(p), size: int64(len(b))}, nil
	}
	return os.Stat(h.realPath(p))
}

func (h *SimHost) procExists(pid int) bool {
	h.w.lock()
	defer h.w.unlock()
	return h.w.lookup(h.ct, pid) != nil
}

// cgroupPIDs lists the pids (in this host's namespace) of the processes in cgroup cg.
func (h *SimHost) cgroupPIDs(cg string) []int {
	h.w.lock()
	defer h.w.unlock()
	var out []int
	for _, p := range h.w.visible(h.ct) {
		if p.cgroupFrom(h.ct) == cg {
			out = append(out, p.nsPID(h.ct))
		}
	}
	return out
}

// readVirtual serves /proc/PID/{cmdline,cgroup,status,comm,stat} and cgroup.procs. ok is false
// for paths that are not virtual.
func (h *SimHost) readVirtual(p string) (b []byte, ok bool, err error) {
	switch {
	case strings.HasPrefix(p, "/proc/"):
		rest := strings.Split(strings.TrimPrefix(p, "/proc/"), "/")
		switch rest[0] {
		case "loadavg":
			return []byte("0.42 0.37 0.30 2/1183 4242\n"), true, nil
		case "uptime":
			return []byte("864000.00 13824000.00\n"), true, nil
		}
		pid, perr := strconv.Atoi(rest[0])
		if perr != nil {
			return nil, true, os.ErrNotExist
		}
		if len(rest) == 1 {
			return nil, true, errIsDir
		}
		if len(rest) != 2 {
			return nil, true, os.ErrNotExist
		}
		w := h.w
		w.lock()
		defer w.unlock()
		pr := w.lookup(h.ct, pid)
		if pr == nil {
			return nil, true, os.ErrNotExist
		}
		switch rest[1] {
		case "cmdline":
			if pr.state == 'Z' {
				return nil, true, nil
			}
			return []byte(strings.Join(pr.args, "\x00") + "\x00"), true, nil
		case "comm":
			return []byte(pr.comm() + "\n"), true, nil
		case "cgroup":
			return []byte("0::" + pr.cgroupFrom(h.ct) + "\n"), true, nil
		case "status":
			var s strings.Builder
			fmt.Fprintf(&s, "Name:\t%s\nUmask:\t0022\nState:\t%s\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t%d\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n",
				pr.comm(), stateName(pr.state), pr.nsPID(h.ct), pr.nsPID(h.ct), pr.nsPPID(h.ct))
			if h.ct != nil || pr.ct != nil {
				fmt.Fprintf(&s, "NSpid:\t%d", pr.hostPID)
				if pr.ct != nil {
					fmt.Fprintf(&s, "\t%d", pr.pid)
				}
				s.WriteString("\n")
			}
			fmt.Fprintf(&s, "VmRSS:\t%8d kB\nThreads:\t%d\n", 2048000, 64)
			return []byte(s.String()), true, nil
		case "stat":
			return []byte(fmt.Sprintf("%d (%s) %c %d %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 64 0 100 0 0\n", pr.nsPID(h.ct), pr.comm(), pr.state, pr.nsPPID(h.ct), pr.nsPID(h.ct), pr.nsPID(h.ct))), true, nil
		}
		return nil, true, os.ErrNotExist
	case strings.HasPrefix(p, "/sys/fs/cgroup/") && strings.HasSuffix(p, "/cgroup.procs"):
		cg := strings.TrimSuffix(strings.TrimPrefix(p, "/sys/fs/cgroup"), "/cgroup.procs")
		pids := h.cgroupPIDs(cg)
		if len(pids) == 0 {
			return nil, true, os.ErrNotExist
		}
		var s strings.Builder
		for _, pid := range pids {
			fmt.Fprintf(&s, "%d\n", pid)
		}
		return []byte(s.String()), true, nil
	}
	return nil, false, nil
}
