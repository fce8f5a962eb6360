package ops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/systemd"
	"github.com/opsbot/opsbot/ops/unit"
)

// DefaultFleetHostTimeout is how long `fleet` waits for one host's answer
// (its one SSH round, a first handshake included) before that host's
// services are shown as not answering.
const DefaultFleetHostTimeout = 1500 * time.Millisecond

// FleetState is what one SSH round per host saw of the services `fleet`
// shows: their units, their speculative settings and their GPUs. What a
// host did not say is unknown (nil), with the reason beside it.
type FleetState struct {
	Services []FleetService `json:"services"` // by name
	Hosts    []FleetHost    `json:"hosts"`    // each host asked, once, by name
}

// FleetHost is one host's SSH round.
type FleetHost struct {
	Name string `json:"name"`
	// Error says why the host gave no answer ("" when it answered).
	Error string        `json:"error,omitempty"`
	Took  time.Duration `json:"took_ns"`
}

// FleetService is one service as its host's round saw it.
type FleetService struct {
	Name string `json:"service"`
	// Group and Replica are set for a replica of a replicated service
	// (ServiceConfig.Replica): the service is named GROUP@REPLICA.
	Group   string `json:"group,omitempty"`
	Replica string `json:"replica,omitempty"`
	Host    string `json:"host"`
	Unit    string `json:"unit"`
	// GPUsConfigured are the host's GPU indexes the service is configured
	// for (nil: every GPU of the host).
	GPUsConfigured []int `json:"gpus_configured,omitempty"`
	// Error says why its host told nothing of it (unreachable, no answer in
	// time); State, Spec and GPUs are then nil.
	Error string `json:"error,omitempty"`
	// State is its unit's state; nil when unknown.
	State *FleetUnit `json:"state"`
	// Spec is the speculative setting its unit starts the engine with, read
	// from the unit's files as `mtp show` reads them; nil when unknown
	// (SpecError says why).
	Spec      *Spec  `json:"spec"`
	SpecError string `json:"spec_error,omitempty"`
	// GPUs are its GPUs' memory as nvidia-smi on its host reports it; nil
	// when unknown (GPUError says why).
	GPUs     []FleetGPU `json:"gpus"`
	GPUError string     `json:"gpu_error,omitempty"`
}

// FleetUnit is a unit's state as `systemctl show` reports it.
type FleetUnit struct {
	LoadState   string `json:"load_state"`
	ActiveState string `json:"active_state"`
	SubState    string `json:"sub_state"`
	Result      string `json:"result"`
	// NRestarts is systemd's count of automatic restarts since the unit was
	// last started by hand (or by a job): not a count per day.
	NRestarts int `json:"n_restarts"`
	MainPID   int `json:"main_pid"`
	// RestartLoop is what `svc status` and the watchdog call a restart
	// loop: systemd restarted it since it was last started.
	RestartLoop      bool `json:"restart_loop"`
	NeedDaemonReload bool `json:"need_daemon_reload"`
	// Since is when it last became active (zero: never, or unknown).
	Since time.Time `json:"since,omitzero"`
}

// FleetGPU is one GPU's memory; UsedMiB and TotalMiB are nil when
// nvidia-smi did not report them.
type FleetGPU struct {
	Index    int    `json:"index"`
	UsedMiB  *int   `json:"used_mib"`
	TotalMiB *int   `json:"total_mib"`
	UUID     string `json:"uuid,omitempty"`
}

// fleetMark starts each part of a host's answer: "==opsbot-fleet== show 3".
const fleetMark = "==opsbot-fleet=="

// Fleet is `fleet`: the services filter names ("": all; a service; or a
// replicated service's group, meaning its replicas), each host asked once,
// all at once, each within Config.FleetHostTimeout. A host that does not
// answer in time, or at all, is its services' Error, not an error of Fleet:
// Fleet fails only for a filter that names no service. It changes nothing
// and takes no lock.
func (r *Runbook) Fleet(ctx context.Context, filter string, rep Reporter) (*Result, error) {
	hostTimeout := r.cfg.FleetHostTimeout
	var services []string
	for _, n := range r.index.names {
		t := r.index.byName[n]
		if filter == "" || n == filter || (t.cfg.Replica != nil && t.cfg.Replica.Group == filter) {
			services = append(services, n)
		}
	}
	if len(services) == 0 {
		_, err := r.cfg.service(filter)
		return nil, err
	}
	sort.Strings(services)
	byHost := map[string][]*target{}
	var hosts []string
	for _, n := range services {
		t, err := r.target(n)
		if err != nil {
			return nil, err
		}
		h := t.cfg.Host
		if byHost[h] == nil {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], t)
	}
	sort.Strings(hosts)
	st := &FleetState{Hosts: make([]FleetHost, len(hosts))}
	seen := make([][]FleetService, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen[i], st.Hosts[i] = r.fleetHost(ctx, h, byHost[h], hostTimeout)
		}()
	}
	wg.Wait()
	for _, ss := range seen {
		st.Services = append(st.Services, ss...)
	}
	sort.Slice(st.Services, func(i, j int) bool { return st.Services[i].Name < st.Services[j].Name })
	answered := 0
	for _, h := range st.Hosts {
		if h.Error == "" {
			answered++
		}
	}
	return &Result{Incidents: []string{}, Fleet: st,
		Summary: fmt.Sprintf("%d services on %d hosts (%d answered)", len(st.Services), len(hosts), answered)}, nil
}

// fleetHost asks one host, in one SSH round, for the state and the unit
// files of each of ts's units and for its GPUs' memory.
func (r *Runbook) fleetHost(ctx context.Context, host string, ts []*target, timeout time.Duration) ([]FleetService, FleetHost) {
	out := make([]FleetService, len(ts))
	for i, t := range ts {
		out[i] = FleetService{Name: t.name, Host: host, Unit: t.cfg.Unit, GPUsConfigured: t.cfg.GPUs}
		if rp := t.cfg.Replica; rp != nil {
			out[i].Group, out[i].Replica = rp.Group, rp.Name
		}
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	res, err := ts[0].host.Run(hctx, nil, "sh", "-c", fleetScript(ts))
	fh := FleetHost{Name: host, Took: time.Since(t0)}
	if err == nil && res.Signal != "" {
		err = fmt.Errorf("the command was killed by signal %s", res.Signal)
	}
	if err != nil {
		// hctx's deadline may have come a moment before hctx.Err() says so
		// (a conn deadline taken from it fires first).
		d, _ := hctx.Deadline()
		if (hctx.Err() != nil || !time.Now().Before(d)) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s", timeout)
		} else {
			err = unwrapRun(err)
		}
		fh.Error = err.Error()
		for i := range out {
			out[i].Error = fmt.Sprintf("%s did not answer: %s", host, fh.Error)
		}
		return out, fh
	}
	parts := splitFleet(res.Stdout)
	gpus, gerr := gpu.ParseGPUs(parts["gpus"])
	if gerr == nil && len(gpus) == 0 {
		gerr = errors.New("nvidia-smi listed no GPU")
		if msg := strings.TrimSpace(string(res.Stderr)); msg != "" {
			gerr = fmt.Errorf("nvidia-smi: %s", firstLine(msg))
		}
	}
	for i, t := range ts {
		fillFleet(&out[i], t, parts["show "+strconv.Itoa(i)], parts["cat "+strconv.Itoa(i)])
		if gerr != nil {
			out[i].GPUError = gerr.Error()
			continue
		}
		out[i].GPUs = []FleetGPU{}
		for _, g := range gpus {
			if !wanted(g.Index, t.cfg.GPUs) {
				continue
			}
			fg := FleetGPU{Index: g.Index, UUID: g.UUID}
			if g.Known {
				fg.UsedMiB = &g.UsedMiB
			}
			if g.TotalMiB >= 0 {
				fg.TotalMiB = &g.TotalMiB
			}
			out[i].GPUs = append(out[i].GPUs, fg)
		}
	}
	return out, fh
}

// unwrapRun shortens remote's "run sh -c '...' on HOST: cause" to its cause:
// the script is opsbot's own and says nothing to a person.
func unwrapRun(err error) error {
	if u := errors.Unwrap(err); u != nil && strings.HasPrefix(err.Error(), "run sh ") {
		return u
	}
	return err
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// fleetScript is the one command line a host runs for `fleet`: for each of
// ts's units (by its place in ts) a marker, `systemctl show` and `systemctl
// cat`, then a marker and nvidia-smi's memory query. Every word is quoted
// (remote.Quote); the list runs under sh -c, so a host's Prefix (pct exec)
// runs all of it inside the container.
func fleetScript(ts []*target) string {
	var cmds []string
	for i, t := range ts {
		cmds = append(cmds,
			remote.Quote([]string{"echo", fleetMark, "show", strconv.Itoa(i)}),
			remote.Quote([]string{"systemctl", "show", "-p", strings.Join(systemd.ShowProperties, ","), t.cfg.Unit}),
			remote.Quote([]string{"echo", fleetMark, "cat", strconv.Itoa(i)}),
			remote.Quote([]string{"systemctl", "cat", t.cfg.Unit}))
	}
	cmds = append(cmds, remote.Quote([]string{"echo", fleetMark, "gpus"}), remote.Quote(gpu.QueryGPUArgv))
	return strings.Join(cmds, "; ")
}

// splitFleet cuts a host's answer at its markers: "show 0", "cat 0", ...,
// "gpus" to the output that followed each.
func splitFleet(out []byte) map[string][]byte {
	parts := map[string][]byte{}
	key := ""
	for len(out) > 0 {
		var line []byte
		line, out, _ = bytes.Cut(out, []byte{'\n'})
		if k, ok := bytes.CutPrefix(line, []byte(fleetMark+" ")); ok {
			key = string(k)
			parts[key] = []byte{}
			continue
		}
		if key != "" {
			parts[key] = append(append(parts[key], line...), '\n')
		}
	}
	return parts
}

// fillFleet reads one unit's show and cat output into s.
func fillFleet(s *FleetService, t *target, show, cat []byte) {
	if show == nil {
		s.Error = "its host's answer ended before it"
		return
	}
	us, err := systemd.ParseShow(show)
	if err != nil {
		s.Error = err.Error()
		return
	}
	s.State = &FleetUnit{LoadState: us.LoadState, ActiveState: us.ActiveState, SubState: us.SubState, Result: us.Result,
		NRestarts: us.NRestarts, MainPID: us.MainPID, RestartLoop: restartedSinceStart(us), NeedDaemonReload: us.NeedDaemonReload,
		Since: us.ActiveEnterTimestamp}
	sp, err := specFromCat(us, cat)
	if err != nil {
		s.SpecError = err.Error()
		return
	}
	s.Spec = sp
}

// specFromCat reads the speculative setting from `systemctl cat` output: the
// unit's fragment and drop-ins, each after a "# PATH" line naming the path
// `systemctl show` gave (FragmentPath, DropInPaths), parsed and merged as
// `mtp show` does with the files it reads.
func specFromCat(us systemd.State, cat []byte) (*Spec, error) {
	if !us.Found() || us.FragmentPath == "" {
		return nil, fmt.Errorf("unit %s is not loaded (LoadState=%s)", us.ID, us.LoadState)
	}
	paths := map[string]bool{us.FragmentPath: true}
	for _, p := range us.DropInPaths {
		paths[p] = true
	}
	texts := map[string]*strings.Builder{}
	var cur *strings.Builder
	for _, line := range strings.SplitAfter(string(cat), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "# "); ok && paths[p] && texts[p] == nil {
			cur = &strings.Builder{}
			texts[p] = cur
			continue
		}
		if cur != nil {
			cur.WriteString(line)
		}
	}
	order := append([]string{us.FragmentPath}, sortedDropIns(us.DropInPaths)...)
	var units []*unit.Unit
	for _, p := range order {
		b := texts[p]
		if b == nil {
			return nil, fmt.Errorf("systemctl cat did not show %s", p)
		}
		// systemctl cat separates files by a blank line of its own.
		text := b.String()
		if p != order[len(order)-1] {
			text = strings.TrimSuffix(text, "\n")
		}
		u, err := unit.Parse(p, text)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", p, err)
		}
		units = append(units, u)
	}
	eff, err := unit.Merge(units[0], units[1:]...)
	if err != nil {
		return nil, err
	}
	sp, err := eff.Spec()
	if err != nil {
		return nil, err
	}
	if !sp.Present {
		return &Spec{Engine: eff.Detection.Engine}, nil
	}
	return specOf(eff.Detection.Engine, sp), nil
}
