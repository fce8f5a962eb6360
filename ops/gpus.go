package ops

import (
	"context"
	"fmt"
	"sort"
	"strings"

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
	Force   bool // kill every holder but the GPU daemons, not only engine processes
	DryRun  bool // show what would be signalled; change nothing
}

// GPURecover is `gpu recover`: stop the service (and its restart loop), kill
// what still holds its GPU memory, wait until clear, start it fresh.
func (r *Runbook) GPURecover(ctx context.Context, service string, o RecoverOptions, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if o.DryRun {
		return r.recoverPreview(ctx, t, o, res, rep)
	}
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
	recordGPUs(res, t.cfg.Host, gpus)
	holders, err := gpu.Holders(ctx, t.node)
	if err != nil {
		return res, st.fail(hostErr("find GPU holders", t.nodeName, err))
	}
	res.Details = append(res.Details, "would stop "+t.cfg.Unit+" on "+t.cfg.Host+", then signal whatever still holds GPU memory:")
	for _, p := range holders {
		verdict := "left alone (not an engine process; --force would kill it)"
		switch {
		case p.Daemon:
			verdict = "never killed (GPU daemon)"
		case p.Engine:
			verdict = "SIGTERM, then SIGKILL if it survives"
		case o.Force:
			verdict = "SIGTERM, then SIGKILL (--force)"
		}
		res.Details = append(res.Details, fmt.Sprintf("  %s PID %d %s: %s", t.nodeName, p.PID, shortCommand(p.Cmdline), verdict))
	}
	if !o.NoStart {
		res.Details = append(res.Details, "then start "+t.cfg.Unit+" and wait until it serves")
	}
	st.done("%d holders", len(holders))
	res.Summary = fmt.Sprintf("dry run: gpu recover %s would look at %d processes; nothing changed", t.name, len(holders))
	return res, nil
}

// GPUStatus is `gpu status [HOST]`: memory per GPU and who holds it, for the
// named host or every host that runs a service.
func (r *Runbook) GPUStatus(ctx context.Context, host string, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	names := make([]string, 0, len(r.cfg.Services))
	for n := range r.cfg.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := map[string]bool{}
	var hosts, lines []string
	for _, n := range names {
		sc := r.cfg.Services[n]
		if (host != "" && sc.Host != host && sc.ProxmoxNode != host) || seen[sc.Host] {
			continue
		}
		seen[sc.Host] = true
		hosts = append(hosts, sc.Host)
		t, err := r.target(n)
		if err != nil {
			return res, err
		}
		gpus, err := queryGPUs(ctx, t)
		if err != nil {
			return res, err
		}
		recordGPUs(res, t.cfg.Host, gpus)
		holders, err := gpu.Holders(ctx, t.node)
		if err != nil {
			return res, hostErr("find GPU holders", t.nodeName, err)
		}
		lines = append(lines, fmt.Sprintf("%s (service %s):", t.cfg.Host, n))
		for _, g := range gpus {
			used := fmt.Sprintf("%6d / %d MiB", g.UsedMiB, g.TotalMiB)
			if !g.Known {
				used = "[N/A]"
			}
			lines = append(lines, fmt.Sprintf("  GPU %d  %s", g.Index, used))
		}
		for _, p := range holders {
			kind := "other"
			switch {
			case p.Daemon:
				kind = "daemon"
			case p.Engine:
				kind = "engine"
			}
			mem := ""
			if p.UsedMiB > 0 {
				mem = fmt.Sprintf(" %d MiB", p.UsedMiB)
			}
			lines = append(lines, fmt.Sprintf("  %s PID %d (%s, %s)%s %s", t.nodeName, p.PID, kind, p.State, mem, shortCommand(p.Cmdline)))
		}
		if s, err := t.unit.Show(ctx); err == nil && s.Stopped() && len(heldGPUs(gpus, sc.GPUs, sc.ClearMiB)) > 0 {
			res.AddIncident(IncidentGPUMemoryHeld)
			lines = append(lines, fmt.Sprintf("  %s is stopped but its GPUs hold memory: `gpu recover %s` clears it", sc.Unit, n))
		}
	}
	if len(hosts) == 0 {
		return res, fmt.Errorf("no service runs on host %q", host)
	}
	res.Details = lines
	res.Summary = "GPU memory on " + strings.Join(hosts, ", ")
	return res, nil
}
