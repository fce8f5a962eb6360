package commands

import (
	"context"

	"github.com/opsbot/opsbot/ops"
)

var mtpShowSpec = &Spec{
	Path:     "mtp show",
	Summary:  "show a service's speculative decoding settings (unit and running engine)",
	Examples: []string{"mtp show", "mtp show qwen"},
	Policy:   Policy{Role: Viewer, Hosts: true, Slash: true, OnGroup: GroupEach},
	new:      func() Command { return new(MTPShow) },
}

// MTPShow is `mtp show [SERVICE]`: a service's speculative decoding settings.
type MTPShow struct {
	On
}

// Spec returns the command's definition.
func (*MTPShow) Spec() *Spec { return mtpShowSpec }

func (c *MTPShow) args() []arg { return []arg{service(&c.On)} }

// Run runs the command's pipeline on rb.
func (c *MTPShow) Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error) {
	return eachReplica(c.On, func(service string) (*ops.Result, error) { return rb.MTPShow(ctx, service, rep) })
}
