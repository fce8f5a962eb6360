package ops

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/opsbot/opsbot/ops/gpu"
)

func queryGPUs(ctx context.Context, t *target) ([]gpu.GPU, error) {
	gpus, err := gpu.Query(ctx, t.host)
	if err != nil {
		return nil, hostErr("nvidia-smi", t.cfg.Host, err)
	}
	return gpus, nil
}

// RecoverOptions tune `gpu recover`.
type RecoverOptions struct {
	NoStart bool // leave the service stopped
	Force   bool // also kill the service's non-engine processes on its GPUs (never a neighbour's, never the GPU daemons)
	DryRun  bool // show what would be signalled; change nothing
}

// GPURecover is `gpu recover`: stop the service (and its restart loop), kill
// what still holds its GPU memory and belongs to it (never a neighbour's),
// wait until clear, start it fresh. It holds the service's node throughout.
func (r *Runbook) GPURecover(ctx context.Context, service string, o RecoverOptions, rep Reporter) (_ *Result, err error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if o.DryRun {
		return r.recoverPreview(ctx, t, o, res, rep)
	}
	defer func() {
		r.leave(ctx, t, res, err == nil && !o.NoStart)
		if res.Left != nil && res.Left.NextStep == NextRecover {
			// It just failed to clear them: show who holds them instead.
			res.Left.NextStep = NextGPUs
		}
	}()
	if !o.NoStart {
		if err := r.checkReach(ctx, t); err != nil {
			return res, err
		}
	}
	unlock, err := r.holdNode(ctx, t, rep)
	if err != nil {
		return res, err
	}
	defer unlock()
	if err := r.stop(ctx, t, res, rep); err != nil {
		return res, err
	}
	if err := r.clearGPUs(ctx, t, res, rep, o.Force); err != nil {
		return res, err
	}
	if o.NoStart {
		res.Summary = fmt.Sprintf("%s stopped, GPUs clear (%d processes signalled); not started (--no-start)", service, len(res.Killed))
		return res, nil
	}
	if err := r.startAndServe(ctx, t, res, rep, false); err != nil {
		return res, err
	}
	res.Summary = fmt.Sprintf("%s recovered: %d processes signalled, GPUs clear, serving again", service, len(res.Killed))
	return res, nil
}

func (r *Runbook) recoverPreview(ctx context.Context, t *target, o RecoverOptions, res *Result, rep Reporter) (*Result, error) {
	st := begin(rep, "preview", "reading GPU memory and its holders")
	gpus, err := queryGPUs(ctx, t)
	if err != nil {
		return res, st.fail(err)
	}
	recordGPUs(res, t.cfg.Host, gpus, t.cfg.GPUs)
	holders, err := gpu.Holders(ctx, t.node)
	if err != nil {
		return res, st.fail(hostErr("find GPU holders", t.nodeName, err))
	}
	s := sortHolders(t, gpus, holders, o.Force)
	res.Details = append(res.Details, "would stop "+t.cfg.Unit+" on "+t.cfg.Host+", then signal what still holds "+t.name+"'s GPUs and belongs to it:")
	for _, p := range s.kill {
		verdict := "SIGTERM, then SIGKILL if it survives"
		if !p.Engine {
			verdict = "SIGTERM, then SIGKILL (--force)"
		}
		res.Details = append(res.Details, fmt.Sprintf("  %s PID %d %s (%s): %s", t.nodeName, p.PID, shortCommand(p.Cmdline), t.scope.Owner(p).Whose, verdict))
	}
	for _, a := range s.alone {
		res.Details = append(res.Details, fmt.Sprintf("  %s PID %d %s: left alone: %s", t.nodeName, a.p.PID, shortCommand(a.p.Cmdline), a.why))
	}
	if !o.NoStart {
		res.Details = append(res.Details, "then start "+t.cfg.Unit+" and wait until it serves")
	}
	n := len(s.kill) + len(s.alone)
	st.done("%d holders of %s's GPUs", n, t.name)
	res.Summary = fmt.Sprintf("dry run: gpu recover %s would signal %d of %d processes on its GPUs; nothing changed", t.name, len(s.kill), n)
	return res, nil
}

// GPUStatus is `gpu status [HOST]`: memory per GPU and who holds it, for
// each physical node that runs a service (all of them, or the one HOST names
// or runs on). GPUs are listed by the node's index with the service they are
// configured for; each holder with whose it is.
func (r *Runbook) GPUStatus(ctx context.Context, host string, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	// Group the services by physical node, in name order.
	var nodes []string
	byNode := map[string][]*target{}
	for _, n := range r.index.names {
		t := r.index.byName[n]
		if host != "" && t.cfg.Host != host && t.nodeName != host {
			continue
		}
		t = r.bind(t)
		if byNode[t.nodeName] == nil {
			nodes = append(nodes, t.nodeName)
		}
		byNode[t.nodeName] = append(byNode[t.nodeName], t)
	}
	if len(nodes) == 0 {
		return res, fmt.Errorf("no service runs on host %q", host)
	}
	var lines []string
	for _, node := range nodes {
		ts := byNode[node]
		nl, err := r.nodeStatus(ctx, node, ts, res)
		if err != nil {
			return res, err
		}
		lines = append(lines, nl...)
	}
	res.Details = lines
	res.Summary = "GPU memory on " + strings.Join(nodes, ", ")
	return res, nil
}

// nodeStatus renders one node's GPUs, their services and holders.
func (r *Runbook) nodeStatus(ctx context.Context, node string, ts []*target, res *Result) ([]string, error) {
	nodeHost := ts[0].node
	ngpus, err := gpu.Query(ctx, nodeHost)
	if err != nil {
		return nil, hostErr("nvidia-smi", node, err)
	}
	recordGPUs(res, node, ngpus, nil)
	holders, err := gpu.Holders(ctx, nodeHost)
	if err != nil {
		return nil, hostErr("find GPU holders", node, err)
	}
	// owner[i] is the service configured for node GPU i (joined on UUID).
	owner := map[int]*target{}
	var svcs []string
	var notes []string
	for _, t := range ts {
		svcs = append(svcs, fmt.Sprintf("%s (%s on %s)", t.name, t.cfg.Unit, t.cfg.Host))
		sg, err := queryGPUs(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, g := range sg {
			if !wanted(g.Index, t.cfg.GPUs) {
				continue
			}
			for _, n := range ngpus {
				if (g.UUID != "" && g.UUID == n.UUID) || ((g.UUID == "" || n.UUID == "") && g.Index == n.Index) {
					owner[n.Index] = t
				}
			}
		}
		if s, err := t.unit.Show(ctx); err == nil && s.Stopped() && len(heldGPUs(sg, t.cfg.GPUs, t.cfg.ClearMiB)) > 0 {
			res.AddIncident(IncidentGPUMemoryHeld)
			if stuck := stuckOn(t, sg, holders); len(stuck) > 0 {
				// No signal ends these: `gpu recover` would only fail again.
				res.AddIncident(IncidentStuckProcess)
				msg, advice := stuckAdvice(t, stuck, &gpu.StuckError{PIDs: pids(stuck), Commands: cmdlines(stuck)}, names(r.onNode(t.nodeName)))
				notes = append(notes, fmt.Sprintf("%s is stopped and its GPUs hold memory: %s. %s", t.cfg.Unit, msg, upperFirst(advice)))
			} else {
				notes = append(notes, fmt.Sprintf("%s is stopped but its GPUs hold memory: `gpu recover %s` clears it", t.cfg.Unit, t.name))
			}
		}
	}
	return append([]string{gpuTables(node, svcs, ngpus, holders, owner)}, notes...), nil
}

// gpuTables renders one node's GPUs and their holders as two tables with
// column headers, in one block: a GPU row per GPU (its memory, the service
// it is configured for, the PIDs holding it), then a row per holder (the
// GPUs it holds, its memory, what it is and whose). Processes that hold no
// GPU of their own (/dev/nvidiactl only, daemons) are listed with GPU "-".
func gpuTables(node string, svcs []string, ngpus []gpu.GPU, holders []gpu.Process, owner map[int]*target) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: services %s\n", node, strings.Join(svcs, ", "))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tUSED MiB\tTOTAL MiB\tSERVICE\tHELD BY (PID)")
	held := map[int][]int{} // holder PID -> node GPU indexes
	for _, g := range ngpus {
		used := strconv.Itoa(g.UsedMiB)
		if !g.Known {
			used = "[N/A]"
		}
		whose := "-"
		if t := owner[g.Index]; t != nil {
			whose = t.name
		}
		var pids []string
		for _, p := range holders {
			if p.Daemon || !p.OnGPU(g.UUID, g.Index) {
				continue
			}
			held[p.PID] = append(held[p.PID], g.Index)
			pids = append(pids, strconv.Itoa(p.PID))
		}
		by := strings.Join(pids, ",")
		if by == "" {
			by = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", g.Index, used, g.TotalMiB, whose, by)
	}
	tw.Flush()
	if len(holders) == 0 {
		b.WriteString("no process holds a GPU")
		return b.String()
	}
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tGPU\tMiB\tKIND\tSTATE\tWHOSE\tCOMMAND")
	for _, p := range holders {
		gs := held[p.PID]
		idx := make([]string, len(gs))
		for i, g := range gs {
			idx[i] = strconv.Itoa(g)
		}
		on, mib, whose := "-", "-", p.Cgroup
		if whose == "" {
			whose = "cgroup unknown"
		}
		if len(gs) > 0 {
			on = strings.Join(idx, ",")
			whose = whoseOn(p, owner[gs[0]])
		}
		if p.UsedMiB > 0 {
			mib = strconv.Itoa(p.UsedMiB)
		}
		if p.Daemon {
			whose = "GPU daemon (never touched)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.PID, on, mib, kindOf(p), orDash(p.State), whose, shortCommand(p.Cmdline))
	}
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func kindOf(p gpu.Process) string {
	switch {
	case p.Daemon:
		return "daemon"
	case p.Engine:
		return "engine"
	}
	return "other"
}

// whoseOn says whose p is, relative to the service of the GPU it was seen on.
func whoseOn(p gpu.Process, t *target) string {
	if t == nil {
		if p.Cgroup == "" {
			return "cgroup unknown"
		}
		return p.Cgroup
	}
	o := t.scope.Owner(p)
	if o.Service {
		return t.name + "'s: " + o.Whose
	}
	return "not " + t.name + "'s: " + o.Whose
}

// stuckOn returns the holders in D state on the GPUs of t (gpus is the
// service host's reading).
func stuckOn(t *target, gpus []gpu.GPU, holders []gpu.Process) []gpu.Process {
	var out []gpu.Process
	for _, p := range holders {
		if p.Daemon || p.State != "D" {
			continue
		}
		for _, g := range gpus {
			if wanted(g.Index, t.cfg.GPUs) && p.OnGPU(g.UUID, g.Index) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func pids(ps []gpu.Process) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}

func cmdlines(ps []gpu.Process) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Cmdline
	}
	return out
}
