// Package jobtest holds job backends for tests: a jobs.Backend made of a
// function, so that a test runs its own pipeline in place of ops's.
//
// It imports of ours only commands, ops and jobs, never the door (bot), so
// that bot's own package-internal tests may use it. Only tests import it
// (internal/arch holds to that).
package jobtest

import (
	"context"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
)

// Func is a jobs.Backend made of a function, for a pipeline that need not
// see the hold its job runs under (HeldFunc's does): Run calls f with the
// job's context, command and reporter and returns what it returns. A nil
// Func panics when run, which a job records as failed.
type Func func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error)

// Run calls f, leaving out the hold.
func (f Func) Run(ctx context.Context, _ ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	return f(ctx, cmd, rep)
}

// HeldFunc is a jobs.Backend made of a function that sees the hold its
// job runs under: Run calls f with all it is given.
type HeldFunc func(ctx context.Context, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error)

// Run calls f.
func (f HeldFunc) Run(ctx context.Context, hold ops.JobHold, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
	return f(ctx, hold, cmd, rep)
}

var (
	_ jobs.Backend = Func(nil)
	_ jobs.Backend = HeldFunc(nil)
)

// OK returns a Backend whose every job succeeds at once: it reports step
// "work" started ("doing " and the command's text) and done ("done"), and
// returns a result whose summary is "all good".
func OK() Func {
	return func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		rep.Report(ops.Event{Step: "work", Status: ops.StepStarted, Message: "doing " + commands.Text(cmd)})
		rep.Report(ops.Event{Step: "work", Status: ops.StepDone, Message: "done"})
		return &ops.Result{Summary: "all good"}, nil
	}
}

// Config is the config of tests whose jobs run on a function backend, a
// format: its store's path and the extra YAML fill the two %s. Its host is one nothing dials (the backend is the
// test's own, so that the decisions can be driven by an injected clock),
// its one service qwen on gpu1 (the default), and it gives console users
// alice, olga and vic the roles admin, operator and viewer.
const Config = `
store: {path: %s}
ssh: {key_file: id_ed25519, known_hosts: known_hosts}
hosts:
  gpu1: {addr: "127.0.0.1:2222", user: root}
default_service: qwen
services:
  qwen: {host: gpu1, unit: sglang-qwen.service, url: "http://127.0.0.1:30000"}
auth:
  users:
    "console:alice": admin
    "console:olga": operator
    "console:vic": viewer
%s
`
