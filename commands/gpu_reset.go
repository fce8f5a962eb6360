package commands

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/opsbot/opsbot/ops"
)

var gpuResetSpec = &Spec{
	Path:    "gpu reset",
	Summary: "reset GPUs whose memory no process holds, and start their services again",
	Details: "Resets exactly the GPUs named (the indexes `gpu status` and `gpu health` list) on the machine that owns them " +
		"(the Proxmox node for a container; NODE may be left out when one machine owns every service's GPUs). Refused, " +
		"changing nothing, while any process holds one of them (each is listed with its service), while a service on them " +
		"is not stopped, or with MIG on. It releases persistence mode for exactly those GPUs (`nvidia-smi -pm 0 -i N`; where " +
		"the driver refuses that, it stops nvidia-persistenced, naming the other GPUs whose persistence drops with it), runs " +
		"`nvidia-smi --gpu-reset -i N`, checks 0 MiB used and no new Xid, puts persistence mode back, then starts the " +
		"services on those GPUs whose units are enabled and waits until they serve. It holds the node for its whole run. A holder in D state needs a reboot.",
	Examples: []string{"gpu reset 2", "gpu reset 2 3 gpu1", "gpu reset 0,1 --dry-run"},
	Policy:   Policy{Role: Admin, Mutating: true, Confirm: true, Lock: LockNone, Hosts: true, Slash: true},
	new:      func() Command { return new(GPUReset) },
}

// GPUReset is `gpu reset GPU... [NODE]`: reset those GPUs of NODE.
type GPUReset struct {
	GPUs []int  `json:"gpus"`
	Node string `json:"node"`
	// Services are the services configured on those GPUs when it was
	// parsed: what its confirmation names. The reset refuses a GPU that
	// another service uses at run time.
	Services []string `json:"services,omitempty"`
	DryRun   bool     `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*GPUReset) Spec() *Spec { return gpuResetSpec }

func (c *GPUReset) args() []arg {
	return []arg{gpuListArg{v: &c.GPUs}, nodeArg{c: c}, dryRun(&c.DryRun)}
}

// Run runs the command's pipeline on rb.
func (c *GPUReset) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.GPUReset(ctx, c.Node, c.GPUs, c.Services, c.DryRun, rep)
}

// previewIn says what the reset will do, naming the services on the GPUs
// (their units and hosts) and the other services of the node it leaves alone.
func (c *GPUReset) previewIn(opts Options) string {
	gw := gpuWords(c.GPUs)
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` will reset %s of %s: refused if any process holds them; persistence mode released for exactly them "+
		"(`nvidia-smi -pm 0 -i N`; where the driver refuses that, nvidia-persistenced is stopped, which drops persistence on %s's other GPUs "+
		"until it is started again right after), `nvidia-smi --gpu-reset -i %s`, a check for 0 MiB and no new Xid, persistence put back",
		Text(c), gw, c.Node, c.Node, joinInts(c.GPUs, ","))
	var on, other []string
	for _, name := range c.Services {
		desc := name
		for _, s := range opts.Services {
			if s.Name == name {
				desc = fmt.Sprintf("%s (%s on %s)", s.Name, s.Unit, s.Host)
			}
		}
		on = append(on, desc)
	}
	for _, s := range opts.Services {
		if s.node() == c.Node && !slices.Contains(c.Services, s.Name) {
			other = append(other, s.Name)
		}
	}
	if len(on) == 0 {
		b.WriteString("; no configured service uses them")
	} else {
		fmt.Fprintf(&b, "; then it starts again, if their units are enabled, %s, and waits until they serve (%s must be stopped for the reset)",
			strings.Join(on, ", "), strings.Join(c.Services, ", "))
	}
	if len(other) > 0 {
		fmt.Fprintf(&b, ". Not touched: %s, on other GPUs of %s", strings.Join(other, ", "), c.Node)
	}
	return b.String() + "."
}

// Preview is previewIn without the configuration: the services named at parse.
func (c *GPUReset) Preview() string { return c.previewIn(Options{}) }

// gpuListArg is GPU...: one or more GPU indexes, by spaces or commas.
type gpuListArg struct {
	required
	v *[]int
}

// MaxGPUIndex is the largest GPU index the language accepts.
const MaxGPUIndex = 63

func (gpuListArg) usage() string { return "GPU..." }
func (gpuListArg) help() (string, string) {
	return "GPU...", "GPU indexes on the machine that owns them, as `gpu status` lists them (2 3, or 2,3)"
}
func (gpuListArg) missing(path string) string {
	return path + " needs the GPUs to reset, e.g. `" + path + " 2`"
}
func (a gpuListArg) render(b *strings.Builder) {
	for _, g := range *a.v {
		writeInt(b, " ", int64(g))
	}
}
func (a gpuListArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	last := i
	for j := i; j < len(toks); j++ {
		w := toks[j].s
		if !isDigits(strings.ReplaceAll(w, ",", "")) || strings.Trim(w, ",") == "" {
			break
		}
		for item := range strings.SplitSeq(w, ",") {
			if item == "" {
				continue
			}
			g, prob := parseInt(item, 0, MaxGPUIndex, "a GPU index")
			if prob != "" {
				return j, prob, ""
			}
			if slices.Contains(*a.v, g) {
				return j, fmt.Sprintf("GPU %d is given twice", g), ""
			}
			*a.v = append(*a.v, g)
		}
		last = j
	}
	if len(*a.v) == 0 {
		return i, fmt.Sprintf("%s is not a GPU index: gpu reset takes the GPUs first", quote(toks[i].s)), "for example `gpu reset 2`"
	}
	slices.Sort(*a.v)
	return last, "", ""
}

// nodeArg is [NODE]: the machine that owns the GPUs: a Proxmox node, or a
// host or service, meaning the machine that owns its GPUs; left out, the one
// machine that owns every service's GPUs.
type nodeArg struct{ c *GPUReset }

func (nodeArg) usage() string  { return "[NODE]" }
func (nodeArg) optional() bool { return true }
func (nodeArg) help() (string, string) {
	return "NODE", "the machine that owns the GPUs (a Proxmox node; a host or service means the one that owns its GPUs); may be left out when one machine owns every service's GPUs"
}
func (nodeArg) missing(path string) string { return path + " needs [NODE]" }
func (a nodeArg) where() On                { return On{Host: a.c.Node} }
func (a nodeArg) render(b *strings.Builder) {
	if a.c.Node != "" {
		b.WriteString(" " + a.c.Node)
	}
}
func (a nodeArg) fill(cp *cmdParse) (string, string) {
	var nodes []string
	for _, s := range cp.p.opts.Services {
		if !slices.Contains(nodes, s.node()) {
			nodes = append(nodes, s.node())
		}
	}
	if len(nodes) != 1 {
		return fmt.Sprintf("gpu reset needs the machine that owns the GPUs: one of %s", strings.Join(nodes, ", ")), ""
	}
	return a.resolve(cp, nodes[0])
}
func (a nodeArg) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if prob := badName(w, "node"); prob != "" {
		return i, prob, ""
	}
	if s := cp.p.findService(w); s != nil {
		prob, sugg := a.resolve(cp, s.node())
		return i, prob, sugg
	}
	for _, s := range cp.p.opts.Services {
		if strings.EqualFold(s.Host, w) || strings.EqualFold(s.node(), w) {
			prob, sugg := a.resolve(cp, s.node())
			return i, prob, sugg
		}
	}
	var nodes []string
	for _, s := range cp.p.opts.Services {
		if !slices.Contains(nodes, s.node()) {
			nodes = append(nodes, s.node())
		}
	}
	sugg := ""
	if m := closest(w, nodes); m != "" {
		sugg = didYouMean("gpu reset " + joinInts(a.c.GPUs, " ") + " " + m)
	}
	return i, fmt.Sprintf("%s owns no configured service's GPUs: the machines are %s", quote(w), strings.Join(nodes, ", ")), sugg
}

// resolve sets the node and the services configured on its GPUs.
func (a nodeArg) resolve(cp *cmdParse, node string) (string, string) {
	a.c.Node, a.c.Services = node, nil
	for _, s := range cp.p.opts.Services {
		if s.node() != node {
			continue
		}
		if len(s.GPUs) == 0 || slices.ContainsFunc(a.c.GPUs, func(g int) bool { return slices.Contains(s.GPUs, g) }) {
			a.c.Services = append(a.c.Services, s.Name)
		}
	}
	slices.Sort(a.c.Services)
	return "", ""
}

// node is the machine that owns the service's GPUs: its Proxmox node, or
// its host.
func (s ServiceRef) node() string {
	if s.Node != "" {
		return s.Node
	}
	return s.Host
}

func gpuWords(gs []int) string {
	if len(gs) == 1 {
		return "GPU " + strconv.Itoa(gs[0])
	}
	return "GPUs " + joinInts(gs, ",")
}

func joinInts(gs []int, sep string) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, sep)
}
