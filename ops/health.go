package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/gpu"
)

// GPUHealth is one GPU's health in a `gpu health` result: the JSON
// "health" rows.
type GPUHealth struct {
	Node     string        `json:"node"`     // the host that owns the GPU
	Services []string      `json:"services"` // configured for it
	GPU      gpu.Health    `json:"gpu"`
	Verdict  gpu.Verdict   `json:"verdict"`
	Findings []gpu.Finding `json:"findings"`
	Next     string        `json:"next"` // the one action that helps next
	// LogUnread says the kernel log could not be read (XIDs unknown).
	LogUnread string `json:"log_unread,omitempty"`
}

// GPUHealth is `gpu health [SERVICE|HOST]`: per GPU, its XID events since
// boot and in the last 24 h with what each means, ECC counters, row remaps,
// persistence, temperature, power, throttle reasons and the PCIe link, and
// one verdict with the action that helps next. The facts come from the host
// that owns the GPUs (a container's Proxmox node). With service, that
// service's GPUs; with host (a host, or a node), every GPU of its node; with
// neither, every GPU of every node that runs a service. A read: no lock, no
// change.
func (r *Runbook) GPUHealth(ctx context.Context, service, host string, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	nodes, byNode, err := r.healthNodes(service, host)
	if err != nil {
		return res, err
	}
	st := begin(rep, "read", "reading GPU health on %s", strings.Join(nodes, ", "))
	now := time.Now()
	for _, node := range nodes {
		hs, err := r.nodeHealth(ctx, node, byNode[node], service, now)
		if err != nil {
			return res, st.fail(err)
		}
		res.Health = append(res.Health, hs...)
	}
	st.done("%d GPUs", len(res.Health))
	res.Summary, res.Details = healthText(res.Health, now)
	return res, nil
}

// healthNodes picks the nodes a health read covers, in name order, and the
// services on each.
func (r *Runbook) healthNodes(service, host string) ([]string, map[string][]*target, error) {
	var node string
	if service != "" {
		t, err := r.target(service)
		if err != nil {
			return nil, nil, err
		}
		node = t.nodeName
	} else if host != "" {
		if node = r.index.nodeOf[host]; node == "" {
			return nil, nil, fmt.Errorf("no service runs on host %q", host)
		}
	}
	nodes := slices.Clone(r.index.nodes) // the caller's to keep
	if node != "" {
		nodes = []string{node}
	}
	byNode := make(map[string][]*target, len(nodes))
	for _, n := range nodes {
		byNode[n] = r.targets(r.index.byNode[n])
	}
	if len(nodes) == 0 {
		return nil, nil, fmt.Errorf("no GPU host is configured")
	}
	return nodes, byNode, nil
}

// nodeHealth reads and judges one node's GPUs (only service's when given).
func (r *Runbook) nodeHealth(ctx context.Context, node string, ts []*target, service string, now time.Time) ([]GPUHealth, error) {
	hs, logErr, err := gpu.ReadHealth(ctx, ts[0].node)
	if err != nil {
		return nil, hostErr("read GPU health", node, err)
	}
	owners, err := r.gpuOwners(ctx, ts, hs)
	if err != nil {
		return nil, err
	}
	clear := 0
	for _, t := range ts {
		clear = max(clear, t.cfg.ClearMiB)
	}
	var out []GPUHealth
	for _, h := range hs {
		svcs := owners[h.Index]
		if service != "" && !containsName(svcs, service) {
			continue
		}
		v, fs := gpu.Judge(h, gpu.JudgeOptions{Now: now, ClearMiB: clear})
		g := GPUHealth{Node: node, Services: names(svcs), GPU: h, Verdict: v, Findings: fs}
		if logErr != nil {
			g.LogUnread = logErr.Error()
		}
		g.Next = nextAction(g, ts)
		out = append(out, g)
	}
	return out, nil
}

// gpuOwners maps each node GPU index to the services configured for it,
// joined on the GPU's UUID (a container may number its GPUs differently).
func (r *Runbook) gpuOwners(ctx context.Context, ts []*target, hs []gpu.Health) (map[int][]*target, error) {
	owners := map[int][]*target{}
	for _, t := range ts {
		var sg []gpu.GPU
		if t.host == t.node {
			for _, h := range hs {
				sg = append(sg, gpu.GPU{Index: h.Index, UUID: h.UUID})
			}
		} else {
			var err error
			if sg, err = queryGPUs(ctx, t); err != nil {
				return nil, err
			}
		}
		for _, g := range sg {
			if !wanted(g.Index, t.cfg.GPUs) {
				continue
			}
			for _, h := range hs {
				if (g.UUID != "" && g.UUID == h.UUID) || ((g.UUID == "" || h.UUID == "") && g.Index == h.Index) {
					owners[h.Index] = append(owners[h.Index], t)
				}
			}
		}
	}
	return owners, nil
}

func containsName(ts []*target, name string) bool {
	for _, t := range ts {
		if t.name == name {
			return true
		}
	}
	return false
}

func names(ts []*target) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.name)
	}
	return out
}

// nextAction is the one command or action that helps g next.
func nextAction(g GPUHealth, ts []*target) string {
	var all []string
	for _, t := range ts {
		all = append(all, t.name)
	}
	svcs := "no configured service"
	if len(g.Services) > 0 {
		svcs = strings.Join(g.Services, ", ")
	}
	switch g.Verdict {
	case gpu.Healthy:
		for _, f := range g.Findings {
			if f.XID != 0 {
				return f.Action
			}
		}
		return "nothing"
	case gpu.Degraded:
		return g.Findings[0].Action
	case gpu.ResetNeeded:
		again := "starts " + svcs + " again"
		if len(g.Services) == 0 {
			again = "starts nothing (no configured service uses it)"
		}
		return fmt.Sprintf("`gpu reset %d %s` (admin): it refuses while a process holds the GPU, releases persistence mode for it, resets it and %s; %s",
			g.GPU.Index, g.Node, again, g.Findings[0].Action)
	case gpu.RebootNeeded:
		return fmt.Sprintf("reboot %s (it takes down %s); %s", g.Node, strings.Join(all, ", "), g.Findings[0].Action)
	}
	return fmt.Sprintf("stop using GPU %d of %s (%s on it): %s", g.GPU.Index, g.Node, svcs, g.Findings[0].Action)
}

// healthText renders the health rows for chat: a summary line, then one
// block with, per GPU, its verdict and next action, its findings and its
// figures.
func healthText(hs []GPUHealth, now time.Time) (string, []string) {
	count := map[gpu.Verdict][]string{}
	var lines []string
	for _, g := range hs {
		id := fmt.Sprintf("%s GPU %d", g.Node, g.GPU.Index)
		count[g.Verdict] = append(count[g.Verdict], id)
		svcs := "no service"
		if len(g.Services) > 0 {
			svcs = strings.Join(g.Services, ", ")
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s (%s, %s): %s\n", id, svcs, g.GPU.BusID, g.Verdict)
		fmt.Fprintf(&b, "  next: %s\n", g.Next)
		for _, f := range g.Findings {
			fmt.Fprintf(&b, "  - %s: %s", f.Verdict, f.What)
			if f.XID != 0 {
				fmt.Fprintf(&b, " -> %s [%s]", f.Action, f.Source)
			}
			b.WriteString("\n")
		}
		b.WriteString("  " + figures(g, now))
		lines = append(lines, b.String())
	}
	var parts []string
	for v := gpu.Replace; v >= gpu.Healthy; v-- {
		if ids := count[v]; len(ids) > 0 {
			if v == gpu.Healthy {
				parts = append(parts, fmt.Sprintf("%d healthy", len(ids)))
			} else {
				parts = append(parts, fmt.Sprintf("%d %s (%s)", len(ids), v, strings.Join(ids, ", ")))
			}
		}
	}
	// One preformatted block for every GPU, a blank line between them: a
	// chat shows it as one table rather than a block per GPU.
	return "GPU health: " + strings.Join(parts, ", "), []string{strings.Join(lines, "\n\n")}
}

// figures is one GPU's facts in three lines (short enough for a chat's
// preformatted block); unknown figures show as —.
func figures(g GPUHealth, now time.Time) string {
	h := g.GPU
	n := func(p *int) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprint(*p)
	}
	yn := func(p *bool, y, no string) string {
		if p == nil {
			return "—"
		}
		if *p {
			return y
		}
		return no
	}
	xids := "—"
	if g.LogUnread == "" {
		day := 0
		for _, e := range h.XIDs {
			if e.At.IsZero() || now.Sub(e.At) <= 24*time.Hour {
				day++
			}
		}
		xids = fmt.Sprintf("%d since boot, %d in 24 h", len(h.XIDs), day)
	}
	throttle := "—"
	if h.Throttle != nil {
		throttle = "none"
		if len(h.Throttle) > 0 {
			throttle = strings.Join(h.Throttle, ",")
		}
	}
	power := "—"
	if h.PowerW != nil && h.PowerLimitW != nil {
		power = fmt.Sprintf("%.0f of %.0f W", *h.PowerW, *h.PowerLimitW)
	}
	return fmt.Sprintf("Xid: %s; ECC uncorrected %s volatile / %s aggregate, corrected %s / %s\n  remapped rows %s corr, %s uncorr, pending %s, failure %s; "+
		"persistence %s\n  %s C, %s; throttle %s; PCIe gen %s x%s of gen %s x%s",
		xids, n(h.ECC.UncorrectedVolatile), n(h.ECC.UncorrectedAggregate), n(h.ECC.CorrectedVolatile), n(h.ECC.CorrectedAggregate),
		n(h.Remap.Correctable), n(h.Remap.Uncorrectable), yn(h.Remap.Pending, "yes", "no"), yn(h.Remap.Failure, "yes", "no"),
		yn(h.Persistence, "on", "off"), n(h.TempC), power, throttle, n(h.PCIe.Gen), n(h.PCIe.Width), n(h.PCIe.GenMax), n(h.PCIe.WidthMax))
}
