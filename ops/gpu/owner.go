package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Scope says which processes belong to one service, as seen from the host
// Holders ran on (the Proxmox node for a container).
type Scope struct {
	Unit string // the service's unit, e.g. sglang-qwen.service
	// VMID is the service's Proxmox container (cgroup /lxc/VMID/...); Container
	// its name, for plain LXC (/lxc.payload.NAME/...). Both zero: a bare host.
	VMID      int
	Container string
}

// Owner is the verdict of Scope.Owner on one process.
type Owner struct {
	Service bool   // the process is the service's: its unit's, or orphaned from it
	Whose   string // for a person: "unit sglang-qwen.service", "container 130", "unit other.service", ...
}

// Owner tells whether p belongs to the service, from p's cgroup (cgroup v2,
// "0::" already cut) and, on a bare host, its parent:
//
//   - in the service's unit cgroup (/lxc/VMID/ns/system.slice/UNIT on
//     Proxmox VE 7+, /lxc.payload.NAME/system.slice/UNIT on plain LXC,
//     /system.slice/UNIT on a bare host; sub-cgroups included): the
//     service's, also after the stop (a left-over of KillMode=process stays there);
//   - inside the service's container but in no unit (the container's root,
//     or a slice without a .service or .scope below it): an orphan of the
//     service, reparented out of its unit;
//   - on a bare host, in the root cgroup with parent 1: an orphan;
//   - anything else is not the service's: another unit's or session's cgroup
//     (live or not), another container, the LXC monitor, the node's own
//     slices, an unknown cgroup, and always a GPU daemon.
//
// Owner does not look at the command line: whether an owned process is killed
// is decided by the caller (engine processes, or every one with --force).
func (s Scope) Owner(p Process) Owner {
	if p.Daemon || IsDaemon(p.Cmdline) {
		return Owner{Whose: "a GPU daemon"}
	}
	cg := strings.TrimPrefix(strings.TrimSpace(p.Cgroup), "0::")
	if cg == "" || !strings.HasPrefix(cg, "/") {
		return Owner{Whose: "unknown (no cgroup)"}
	}
	ct, inner, inCT := containerOf(cg)
	ours := s.VMID != 0 || s.Container != ""
	switch {
	case strings.HasPrefix(cg, "/lxc.monitor") || strings.HasPrefix(cg, "/lxc.pivot"):
		return Owner{Whose: "the LXC monitor (" + cg + ")"}
	case inCT && !(ours && s.isOurs(ct)):
		return Owner{Whose: "container " + ct.String()}
	case !inCT && ours:
		return Owner{Whose: "the node (" + cg + ")"}
	}
	// inner is the process's cgroup inside the service's own container, or on the bare host.
	unitCG := "/system.slice/" + s.Unit
	if s.Unit != "" && (inner == unitCG || strings.HasPrefix(inner, unitCG+"/")) {
		return Owner{Service: true, Whose: "unit " + s.Unit}
	}
	if u := unitIn(inner); u != "" {
		return Owner{Whose: "unit " + u}
	}
	if ours {
		return Owner{Service: true, Whose: fmt.Sprintf("orphan in container %s", s.name())}
	}
	if inner == "/" && p.PPID == 1 {
		return Owner{Service: true, Whose: "orphan (parent 1, root cgroup)"}
	}
	return Owner{Whose: "the host (" + cg + ")"}
}

func (s Scope) name() string {
	if s.VMID != 0 {
		return strconv.Itoa(s.VMID)
	}
	return s.Container
}

func (s Scope) isOurs(ct ctID) bool {
	if ct.vmid != 0 {
		return ct.vmid == s.VMID
	}
	return ct.name != "" && ct.name == s.Container
}

// ctID names a container: by VMID (Proxmox) or by name (plain LXC).
type ctID struct {
	vmid int
	name string
}

func (c ctID) String() string {
	if c.vmid != 0 {
		return strconv.Itoa(c.vmid)
	}
	return c.name
}

// containerOf splits a node-side cgroup into its container and the path inside
// it: /lxc/130/ns/system.slice/x.service -> 130, /system.slice/x.service;
// /lxc.payload.web/init.scope -> web, /init.scope.
func containerOf(cg string) (ctID, string, bool) {
	var id ctID
	var rest string
	switch {
	case strings.HasPrefix(cg, "/lxc/"):
		head, tail, _ := strings.Cut(cg[len("/lxc/"):], "/")
		n, err := strconv.Atoi(head)
		if err != nil || n <= 0 {
			id.name = head
		} else {
			id.vmid = n
		}
		rest = "/" + tail
		if r, ok := strings.CutPrefix(rest, "/ns"); ok && (r == "" || strings.HasPrefix(r, "/")) {
			rest = "/" + strings.TrimPrefix(r, "/")
		}
	case strings.HasPrefix(cg, "/lxc.payload."):
		head, tail, _ := strings.Cut(cg[len("/lxc.payload."):], "/")
		id.name, rest = head, "/"+tail
	default:
		return id, cg, false
	}
	if id.vmid == 0 && id.name == "" {
		return id, cg, false
	}
	return id, rest, true
}

// unitIn is the innermost unit (.service or .scope) a cgroup path names, ""
// when it names none (a slice, or the root).
func unitIn(cg string) string {
	parts := strings.Split(strings.Trim(cg, "/"), "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if strings.HasSuffix(parts[i], ".service") || strings.HasSuffix(parts[i], ".scope") {
			return parts[i]
		}
	}
	return ""
}
