package commands

import (
	"context"
	"strings"

	"github.com/opsbot/opsbot/ops"
)

var gpuHealthSpec = &Spec{
	Path:    "gpu health",
	Summary: "is it the GPU or the software? XIDs, ECC, row remaps, PCIe link, throttling, and a verdict per GPU",
	Details: "For each GPU of the service (or of the host's node; every GPU host when left out): the driver's Xid events " +
		"since boot and in the last 24 h with what each means, ECC errors (volatile and aggregate), remapped rows, persistence " +
		"mode, temperature, power, throttle reasons and the PCIe link against its maximum, read from the machine that owns " +
		"the GPUs (the Proxmox node for a container). One verdict per GPU (healthy, degraded, reset needed, reboot needed, " +
		"hardware: replace) with the one action that helps next.",
	Examples: []string{"gpu health", "gpu health qwen", "gpu health pve"},
	Policy:   Policy{Role: Viewer, Hosts: true, Slash: true, OnGroup: GroupEach},
	new:      func() Command { return new(GPUHealth) },
}

// GPUHealth is `gpu health [SERVICE|HOST]`: per GPU health and a verdict.
// Service set: that service's GPUs; else Host: its node's GPUs; neither: all.
type GPUHealth struct {
	On
}

// Spec returns the command's definition.
func (*GPUHealth) Spec() *Spec { return gpuHealthSpec }

func (c *GPUHealth) args() []arg { return []arg{serviceOrHost{on: &c.On}} }

// Run runs the command's pipeline on rb.
func (c *GPUHealth) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return eachReplica(c.On, func(service string) (*ops.Result, error) { return rb.GPUHealth(ctx, service, c.Host, rep) })
}

// serviceOrHost is [SERVICE|HOST]: a service (its GPUs), a host (its node's
// GPUs), or, left out, every GPU host.
type serviceOrHost struct{ on *On }

func (serviceOrHost) usage() string  { return "[SERVICE|HOST]" }
func (serviceOrHost) optional() bool { return true }
func (serviceOrHost) help() (string, string) {
	return "SERVICE|HOST", "a service (its GPUs) or a host (every GPU of its node); all GPU hosts when left out"
}
func (serviceOrHost) missing(path string) string { return path + " needs [SERVICE|HOST]" }
func (a serviceOrHost) where() On                { return *a.on }
func (a serviceOrHost) render(b *strings.Builder) {
	switch {
	case a.on.Service != "":
		b.WriteString(" " + a.on.Service)
	case a.on.Host != "":
		b.WriteString(" " + a.on.Host)
	}
}
func (a serviceOrHost) fill(cp *cmdParse) (string, string) { return "", "" }
func (a serviceOrHost) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	if s := cp.p.findService(toks[i].s); s != nil && badName(toks[i].s, "service") == "" {
		a.on.Service, a.on.Host = s.Name, s.Host
		return i, "", ""
	}
	if g, reps := cp.p.findReplicated(toks[i].s); g != "" && badName(toks[i].s, "service") == "" {
		prob, sugg := cp.onGroup(a.on, g, reps, replaceWord(toks, i, reps[0]))
		return i, prob, sugg
	}
	return hostArg(a).parse(cp, toks, i)
}
