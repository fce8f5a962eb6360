package ops

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/opsbot/opsbot/ops/gpu"
)

// ResetRefusedError is a `gpu reset` refused before anything was changed:
// a process holds one of the GPUs, a service on them is not stopped, a
// service on them was not named in the confirmation, MIG is on, or a GPU
// does not exist. Advice says what helps (a reboot for a holder in D state).
type ResetRefusedError struct {
	Node    string
	GPUs    []int
	Reasons []string
	Advice  string
	// Stuck: a holder is in D state; only a reboot of Node frees it.
	Stuck bool
}

func (e *ResetRefusedError) Error() string {
	s := fmt.Sprintf("%s of %s not reset, nothing changed: %s", gpuWord(e.GPUs), e.Node, strings.Join(e.Reasons, "; "))
	if e.Advice != "" {
		s += ". " + upperFirst(e.Advice)
	}
	return s
}

// resetPlan is what a reset acts on, read and checked before any change.
type resetPlan struct {
	node     string
	io       hostIO    // the machine that owns the GPUs
	ts       []*target // every service on the node, name order
	gpus     []int     // node indexes, ascending
	hs       []gpu.Health
	logErr   error              // the kernel log could not be read: XIDs unknown
	owners   map[int][]*target  // node GPU index -> services configured for it
	services []*target          // the services on the reset GPUs, name order
	persist  map[int]bool       // persistence mode before, by node GPU index (known ones)
	xids     map[int]int        // Xid events since boot before, by node GPU index
	used     map[int]gpu.Health // the reset GPUs' readings before
}

// GPUReset is `gpu reset GPU... [NODE]`: reset exactly the GPUs named on the
// machine that owns them (a container's Proxmox node), named by the node's
// indexes. It refuses, changing nothing, while any process holds one of them
// (naming each with its service), while a service on them is not stopped,
// when a service on them is missing from named (what the confirmation
// named), or with MIG on. Then it releases persistence mode for exactly
// those GPUs (`nvidia-smi -pm 0 -i N`; where the driver refuses that,
// nvidia-persistenced is stopped, naming the other GPUs whose persistence
// drops with it), runs `nvidia-smi --gpu-reset -i N,...`, verifies 0 MiB
// used and no new Xid on them, puts persistence back as it was, and starts
// the services on them whose units are enabled, waiting until each serves.
// It holds the node throughout. dryRun checks and says what it would do.
func (r *Runbook) GPUReset(ctx context.Context, node string, gpus []int, named []string, dryRun bool, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	ts := r.onNode(node)
	if len(ts) == 0 {
		return res, fmt.Errorf("no configured service runs on %q: gpu reset acts on the machine that owns a service's GPUs", node)
	}
	if !dryRun {
		unlock, err := r.holdNode(ctx, ts[0], rep)
		if err != nil {
			return res, err
		}
		defer unlock()
	}
	p, err := r.planReset(ctx, node, ts, gpus, named, res, rep)
	if err != nil {
		return res, err
	}
	if dryRun {
		res.Details = p.describe()
		res.Summary = fmt.Sprintf("dry run: gpu reset would reset %s of %s; nothing changed", gpuWord(p.gpus), node)
		return res, nil
	}
	restore, err := r.releasePersistence(ctx, p, res, rep)
	if err != nil {
		return res, err
	}
	err = r.resetAndVerify(ctx, p, res, rep)
	restored := restore(ctx)
	if err != nil {
		return res, err
	}
	started, err := r.startEnabled(ctx, p, res, rep)
	res.Summary = fmt.Sprintf("%s of %s reset: 0 MiB used, no new Xid, persistence %s", gpuWord(p.gpus), node, restored)
	if len(started) > 0 {
		res.Summary += "; " + strings.Join(started, ", ") + " serving again"
	}
	return res, err
}

// onNode returns the services whose GPUs node owns, in name order.
func (r *Runbook) onNode(node string) []*target {
	return r.targets(r.index.byNode[node])
}

// planReset reads the node's GPUs and holders and refuses what may not be
// reset (a *ResetRefusedError).
func (r *Runbook) planReset(ctx context.Context, node string, ts []*target, gpus []int, named []string, res *Result, rep Reporter) (*resetPlan, error) {
	st := begin(rep, "check", "reading %s of %s and what holds them", gpuWord(gpus), node)
	p := &resetPlan{node: node, io: ts[0].node, ts: ts, gpus: slices.Sorted(slices.Values(gpus)), persist: map[int]bool{}, xids: map[int]int{}, used: map[int]gpu.Health{}}
	p.gpus = slices.Compact(p.gpus)
	hs, logErr, err := gpu.ReadHealth(ctx, p.io)
	if err != nil {
		return nil, st.fail(hostErr("read the GPUs", node, err))
	}
	p.hs, p.logErr = hs, logErr
	if p.owners, err = r.gpuOwners(ctx, ts, hs); err != nil {
		return nil, st.fail(err)
	}
	refuse := &ResetRefusedError{Node: node, GPUs: p.gpus}
	for _, g := range p.gpus {
		h, ok := healthOf(hs, g)
		if !ok {
			refuse.Reasons = append(refuse.Reasons, fmt.Sprintf("%s has no GPU %d (it has %d)", node, g, len(hs)))
			continue
		}
		p.used[g] = h
		if h.MIG != nil && *h.MIG {
			refuse.Reasons = append(refuse.Reasons, fmt.Sprintf("GPU %d has MIG on: its GPU instances must be destroyed before a reset, which gpu reset does not do", g))
		}
		if h.Persistence != nil {
			p.persist[g] = *h.Persistence
		}
		p.xids[g] = len(h.XIDs)
		for _, t := range p.owners[g] {
			if !slices.Contains(p.services, t) {
				p.services = append(p.services, t)
			}
		}
	}
	sort.Slice(p.services, func(i, j int) bool { return p.services[i].name < p.services[j].name })
	for _, t := range p.services {
		if !slices.Contains(named, t.name) {
			refuse.Reasons = append(refuse.Reasons, fmt.Sprintf("%s uses %s, and the confirmation did not name it", t.name, gpuWord(p.gpusOf(t))))
		}
	}
	r.refuseRunning(ctx, p, refuse)
	if err := r.refuseHolders(ctx, p, refuse); err != nil {
		return nil, st.fail(err)
	}
	for _, g := range p.gpus {
		if h, ok := p.used[g]; ok {
			res.GPUs = append(res.GPUs, GPUMemory{Host: node, Index: g, UsedMiBBefore: derefOr(h.UsedMiB, -1), UsedMiBAfter: derefOr(h.UsedMiB, -1)})
		}
	}
	if len(refuse.Reasons) > 0 {
		if refuse.Stuck {
			res.AddIncident(IncidentStuckProcess)
		}
		return nil, st.fail(refuse)
	}
	st.done("%s: %s", gpuWord(p.gpus), p.servicesText())
	return p, nil
}

// refuseRunning adds a reason for each service on the GPUs whose unit is
// not stopped: its engine would hold the GPU again at any moment.
func (r *Runbook) refuseRunning(ctx context.Context, p *resetPlan, refuse *ResetRefusedError) {
	for _, t := range p.services {
		s, err := t.unit.Show(ctx)
		switch {
		case err != nil:
			refuse.Reasons = append(refuse.Reasons, fmt.Sprintf("the state of %s on %s is unknown (%v)", t.cfg.Unit, t.cfg.Host, err))
		case !s.Stopped():
			refuse.Reasons = append(refuse.Reasons, fmt.Sprintf("%s (%s on %s) is %s/%s: stop it first (`svc stop %s`, or `gpu recover %s --no-start`)",
				t.name, t.cfg.Unit, t.cfg.Host, s.ActiveState, s.SubState, t.name, t.name))
		}
	}
}

// refuseHolders adds a reason for each process that holds one of the GPUs
// (memory there or its device file open), the GPU daemons aside, with whose
// it is; a holder in D state makes the advice a reboot of the node.
func (r *Runbook) refuseHolders(ctx context.Context, p *resetPlan, refuse *ResetRefusedError) error {
	holders, err := gpu.Holders(ctx, p.io)
	if err != nil {
		return hostErr("find GPU holders", p.node, err)
	}
	for _, h := range holders {
		if h.Daemon {
			continue
		}
		var on []int
		for _, g := range p.gpus {
			if hh, ok := p.used[g]; ok && h.OnGPU(hh.UUID, g) {
				on = append(on, g)
			}
		}
		if len(on) == 0 {
			continue
		}
		state := orDash(h.State)
		refuse.Reasons = append(refuse.Reasons, fmt.Sprintf("PID %d (%s, state %s) holds %s: %s", h.PID, shortCommand(h.Cmdline), state, gpuWord(on), p.whose(h, on[0])))
		if h.State == "D" {
			refuse.Stuck = true
		}
	}
	if refuse.Stuck {
		refuse.Advice = rebootAdvice(p.node, names(p.ts), "a process in D state holds the GPU: no signal ends it and the driver refuses the reset while it does")
	}
	return nil
}

// rebootAdvice says that node needs a reboot and which services it takes down.
func rebootAdvice(node string, services []string, why string) string {
	return fmt.Sprintf("%s: reboot %s, which takes down %s", why, node, strings.Join(services, ", "))
}

// whose says whose h is, by the services configured for GPU g.
func (p *resetPlan) whose(h gpu.Process, g int) string {
	for _, t := range p.owners[g] {
		if o := t.scope.Owner(h); o.Service {
			return t.name + "'s (" + o.Whose + ")"
		}
	}
	if ts := p.owners[g]; len(ts) > 0 {
		return "not " + strings.Join(names(ts), "'s or ") + "'s: " + ts[0].scope.Owner(h).Whose
	}
	if h.Cgroup != "" {
		return h.Cgroup
	}
	return "cgroup unknown"
}

// gpusOf returns the reset GPUs t is configured for.
func (p *resetPlan) gpusOf(t *target) []int {
	var out []int
	for _, g := range p.gpus {
		if slices.Contains(p.owners[g], t) {
			out = append(out, g)
		}
	}
	return out
}

// servicesText names the services on the reset GPUs, or says there are none.
func (p *resetPlan) servicesText() string {
	if len(p.services) == 0 {
		return "no configured service uses them"
	}
	var parts []string
	for _, t := range p.services {
		parts = append(parts, fmt.Sprintf("%s's (%s on %s)", t.name, t.cfg.Unit, t.cfg.Host))
	}
	return strings.Join(parts, ", ")
}

// describe is a dry run's account of what the reset would do.
func (p *resetPlan) describe() []string {
	var on []string
	for _, g := range p.gpus {
		if p.persist[g] {
			on = append(on, fmt.Sprint(g))
		}
	}
	out := []string{fmt.Sprintf("%s: %s; no process holds them", gpuWord(p.gpus), p.servicesText())}
	if len(on) > 0 {
		out = append(out, fmt.Sprintf("would release persistence mode on GPU %s (nvidia-smi -pm 0 -i N; nvidia-persistenced stopped instead where the driver refuses that) and restore it after", strings.Join(on, ",")))
	}
	out = append(out, fmt.Sprintf("would run %s on %s, check 0 MiB used and no new Xid", strings.Join(gpu.ResetArgv(p.gpus), " "), p.node))
	for _, t := range p.services {
		out = append(out, fmt.Sprintf("would start %s on %s again if it is enabled, and wait until it serves", t.cfg.Unit, t.cfg.Host))
	}
	return out
}

func healthOf(hs []gpu.Health, index int) (gpu.Health, bool) {
	for _, h := range hs {
		if h.Index == index {
			return h, true
		}
	}
	return gpu.Health{}, false
}

func derefOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// gpuWord renders "GPU 2" or "GPUs 2,3".
func gpuWord(gs []int) string {
	idx := make([]string, len(gs))
	for i, g := range gs {
		idx[i] = fmt.Sprint(g)
	}
	if len(idx) == 1 {
		return "GPU " + idx[0]
	}
	return "GPUs " + strings.Join(idx, ",")
}
