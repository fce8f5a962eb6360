package commands

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/opsbot/opsbot/ops"
)

// Replicated services. A service configured with replicas (the group, qwen)
// is run as one service per replica, named GROUP@REPLICA (qwen@gpu3,
// ops.ReplicaName): a command names a replica like any service. A command
// naming the group itself does what its Policy.OnGroup says, decided in one
// place, onGroup.

// GroupUse is what a command does when it names a replicated service itself
// (qwen rather than qwen@gpu3).
type GroupUse int

const (
	// GroupRefused: the command is refused, naming the replicas to choose
	// from. The zero value, so that a new command acts on one replica
	// unless its definition says otherwise.
	GroupRefused GroupUse = iota
	// GroupEach: a read-only command runs on every replica in turn and
	// shows each (On.Replicas).
	GroupEach
	// GroupRollout: a change that rolls out across the replicas (On.Replicas):
	// the canary, its gate, then waves (ops.Runbook.Rollout), confirmed
	// first with the plan.
	GroupRollout
)

// String returns "refused", "each" or "rollout".
func (g GroupUse) String() string {
	switch g {
	case GroupRefused:
		return "refused"
	case GroupEach:
		return "each"
	case GroupRollout:
		return "rollout"
	}
	return fmt.Sprintf("GroupUse(%d)", int(g))
}

// help says in help what a command does with a replicated service.
func (g GroupUse) help() string {
	switch g {
	case GroupEach:
		return "runs on each replica and shows each"
	case GroupRollout:
		return "runs as a rollout: a canary judged by the gate against an unchanged sibling, then waves; the confirmation shows the plan"
	}
	return "refused; name one replica"
}

// namesService reports whether a command's binding takes a service (or a
// host a service may stand for).
func namesService(b binding) bool {
	for _, p := range b.params {
		if _, ok := p.(interface{ where() On }); ok {
			return true
		}
	}
	return false
}

// GroupOf returns the replicated service a replica's service name belongs
// to ("qwen" for "qwen@gpu3"), or "" for a name that is no replica's: the
// inverse of ops.ReplicaName.
func GroupOf(service string) string {
	g, _, ok := strings.Cut(service, "@")
	if !ok {
		return ""
	}
	return g
}

// ValidServiceName reports whether s is a service name of the grammar: a
// name (ValidName), or GROUP@REPLICA with both parts names.
func ValidServiceName(s string) bool {
	if g, r, ok := strings.Cut(s, "@"); ok {
		return ValidName(g) && ValidName(r)
	}
	return ValidName(s)
}

// findReplicated returns the replicated service named w (case-insensitively)
// and its replicas' service names in config order, or "" when w names none.
func (p *parser) findReplicated(w string) (string, []string) {
	var group string
	var reps []string
	for _, s := range p.opts.Services {
		if s.Group != "" && strings.EqualFold(s.Group, w) {
			group = s.Group
			reps = append(reps, s.Name)
		}
	}
	return group, reps
}

// replicated lists the replicated services, in config order.
func (p *parser) replicated() []string {
	var out []string
	for _, s := range p.opts.Services {
		if s.Group != "" && !slices.Contains(out, s.Group) {
			out = append(out, s.Group)
		}
	}
	return out
}

// onGroup resolves a command naming the replicated service group (whose
// replicas are reps) into on, or refuses it: the one place a group command
// is decided, from its Policy.OnGroup. typed is what was typed with the
// group's word replaced by its first replica's, for the refusal's example;
// "" when the group was not typed (a default), and the command is rendered.
func (cp *cmdParse) onGroup(on *On, group string, reps []string, typed string) (problem, suggestion string) {
	if cp.spec.OnGroup == GroupEach || cp.spec.OnGroup == GroupRollout {
		on.Service, on.Host, on.Replicas = group, "", append([]string(nil), reps...)
		return "", ""
	}
	if typed == "" {
		keep := *on
		on.Service, on.Host, on.Replicas = reps[0], "", nil
		for _, s := range cp.p.opts.Services {
			if s.Name == reps[0] {
				on.Host = s.Host
			}
		}
		typed = render(cp.c)
		*on = keep
	}
	example := "for example `" + typed + "`"
	list := strings.Join(reps, ", ")
	return fmt.Sprintf("%s has replicas: name one (%s); %s acts on one replica at a time", group, list, cp.spec.Path), example
}

// eachReplica runs one on on.Service, or, for a command naming a replicated
// service (on.Replicas), on each replica in turn: the result's Summary
// counts them, its Details hold each replica's summary and details, its
// Incidents are every replica's and Replicas holds each result. A replica
// that fails does not stop the others; the error names each that failed.
func eachReplica(on On, one func(service string) (*ops.Result, error)) (*ops.Result, error) {
	if len(on.Replicas) == 0 {
		return one(on.Service)
	}
	res := &ops.Result{Incidents: []string{}}
	var errs []error
	failed := 0
	for _, name := range on.Replicas {
		r, err := one(name)
		if r == nil {
			r = &ops.Result{Incidents: []string{}}
		}
		if err != nil {
			failed++
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			if r.Summary == "" {
				r.Summary = fmt.Sprintf("%s: %v", name, err)
			}
		}
		res.Replicas = append(res.Replicas, r)
		res.Details = append(res.Details, r.Summary)
		for _, d := range r.Details {
			res.Details = append(res.Details, "  "+d)
		}
		for _, code := range r.Incidents {
			res.AddIncident(code)
		}
		res.GPUs = append(res.GPUs, r.GPUs...)
		res.Health = append(res.Health, r.Health...)
	}
	res.Summary = fmt.Sprintf("%s: %d replicas", on.Service, len(on.Replicas))
	if failed > 0 {
		res.Summary += fmt.Sprintf(", %d could not be read", failed)
	}
	return res, errors.Join(errs...)
}
