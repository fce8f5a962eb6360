package commands

import (
	"context"
	"strings"

	"github.com/opsbot/opsbot/ops"
)

var fleetSpec = &Spec{
	Path:    "fleet",
	Summary: "one message for the whole fleet: every service on every host, rows needing attention first",
	Details: "For each service (each replica of a replicated service, named GROUP@REPLICA): its systemd state, " +
		"its speculative setting as its unit starts it, the last benchmark's tok/s and accept length with their age, " +
		"its GPUs' memory, NRestarts, open incidents and the job running on it. Answered at once from the store " +
		"and one SSH round per host, all hosts at once; a host that does not answer within 1.5 s is a row saying so. " +
		"SERVICE narrows it to one service, or to a replicated service's replicas.",
	Examples: []string{"fleet", "fleet qwen"},
	Policy:   Policy{Role: Viewer, Hosts: true, Answered: true, Slash: true, OnGroup: GroupEach},
	new:      func() Command { return new(Fleet) },
}

// Fleet is `fleet [SERVICE]`: every service (Service "") or the one named,
// or a replicated service's replicas (Service its group's name).
type Fleet struct {
	On // Host only for a service, none for a group
}

// Spec returns the command's definition.
func (*Fleet) Spec() *Spec { return fleetSpec }

func (c *Fleet) args() []arg { return []arg{fleetFilter{on: &c.On}} }

// Run reads the fleet's hosts (ops.Runbook.Fleet); the door calls it
// outside a job (Policy.Answered) and adds what the store knows.
func (c *Fleet) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return rb.Fleet(ctx, c.Service, rep)
}

// fleetFilter is [SERVICE] of `fleet`: a configured service, or the group
// of replicated services named GROUP@REPLICA; left out, every service.
type fleetFilter struct{ on *On }

func (fleetFilter) usage() string  { return "[SERVICE]" }
func (fleetFilter) optional() bool { return true }
func (fleetFilter) help() (string, string) {
	return "SERVICE", "a configured service, or a replicated service (all its replicas); every service when left out"
}
func (fleetFilter) missing(path string) string      { return path + " needs [SERVICE]" }
func (a fleetFilter) where() On                     { return *a.on }
func (fleetFilter) fill(*cmdParse) (string, string) { return "", "" }
func (a fleetFilter) render(b *strings.Builder) {
	if a.on.Service != "" {
		b.WriteByte(' ')
		b.WriteString(a.on.Service)
	}
}
func (a fleetFilter) parse(cp *cmdParse, toks []token, i int) (int, string, string) {
	w := toks[i].s
	if prob := badName(w, "service"); prob != "" {
		return i, prob, ""
	}
	if s := cp.p.findService(w); s != nil {
		a.on.Service, a.on.Host = s.Name, s.Host
		return i, "", ""
	}
	for _, s := range cp.p.opts.Services {
		if g, _, ok := strings.Cut(s.Name, "@"); ok && strings.EqualFold(g, w) {
			a.on.Service = g
			return i, "", ""
		}
	}
	prob, sugg := cp.p.unknownService(w, toks, i)
	return i, prob, sugg
}
