// Package commands is opsbot's command language: the words people type in Slack
// (`/mtp steps 10`), Matrix (`!mtp steps 10`) or a terminal (`mtp steps 10`).
//
// Each command is a Go type of its own (MTPSteps, GPURecover, Jobs, ...) in a
// file of its own, holding its arguments as typed fields, and one Spec: its
// path, help text, examples and Policy. The type's args method binds its
// fields to the argument kinds of args.go, and that one binding drives
// parsing, validation, the usage line, help, the canonical text (Text) and
// the "did you mean"; a job command's Run says what it runs on the hosts.
// Parse turns text into a Command or a *UsageError that says what was wrong,
// the usage line and a suggestion; nothing else in opsbot interprets command
// text. Encode and Decode keep a command as data (its arguments, with a
// version), for the jobs the store keeps.
//
// Parsing is pure: no I/O, no clock, no globals that change, safe for
// concurrent use. The one exception is validating a cron spec's CRON_TZ=
// zone, which loads the zone from the embedded time zone database
// (time/tzdata) when the system has none.
package commands

import (
	"context"
	"fmt"
	"strings"

	_ "time/tzdata" // CRON_TZ= zones validate the same on hosts without /usr/share/zoneinfo

	"github.com/opsbot/opsbot/ops"
)

// Role is the access a command needs. Higher roles include the lower ones.
type Role int

// The roles, in increasing order of power. The zero Role is no access.
const (
	Viewer   Role = 1 // read-only commands
	Operator Role = 2 // commands that change a host
	Admin    Role = 3 // schedules, and gpu recover --force
)

// String returns "viewer", "operator" or "admin" ("Role(N)" for anything else).
func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Operator:
		return "operator"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole parses "viewer", "operator" or "admin", case-insensitively.
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return Viewer, nil
	case "operator":
		return Operator, nil
	case "admin":
		return Admin, nil
	}
	return 0, fmt.Errorf("parse role %q: want viewer, operator or admin", s)
}

// Lock says what a command holds exclusively while its job runs.
type Lock int

const (
	LockNone    Lock = iota // never waits for anything (read-only commands)
	LockService             // one such job per service at a time (the command's service)
)

// String returns "none" or "service".
func (l Lock) String() string {
	switch l {
	case LockNone:
		return "none"
	case LockService:
		return "service"
	}
	return fmt.Sprintf("Lock(%d)", int(l))
}

// Policy is what the door and the runtime decide about a command before
// they run it, declared once with the command.
type Policy struct {
	Role     Role // the role needed (a command may raise it: gpu recover --force)
	Mutating bool // changes a host or the schedules; takes --dry-run
	Confirm  bool // asks for confirmation before it runs (not for a dry run)
	Lock     Lock // what its job locks (not for a dry run)
	// Schedulable is true for job commands that `schedule add` accepts.
	Schedulable bool
	// Hosts is true for a job command: it runs an ops pipeline on the
	// service's hosts (its type implements Job). False: the door answers it
	// from the store.
	Hosts bool
	// Answered is true for a command on hosts (Hosts) that the door answers
	// at once, in one message, without a job: its Run is called outside any
	// job (no job row, no status thread, no lock, no hold), for a read of
	// many hosts that must answer within seconds (`fleet`).
	Answered bool
	// Reaps is true for a job command whose pipeline may kill processes
	// holding its service's GPUs (it stops the service and clears its GPUs
	// before a start): it touches the service's node, so the door asks for
	// its role on every service whose GPUs it could touch.
	Reaps bool
	// Slash is true when the command's group is a Slack slash command of its
	// own (`/mtp steps 10`); false: it is typed after SlackCatchAll
	// (`/opsbot ack 3`). Every command of a group says the same.
	Slash bool
	// OnGroup is what the command does when it names a replicated service
	// itself (qwen, not the replica qwen@gpu3): refused (the zero value),
	// each replica in turn, or a rollout (replicas.go).
	OnGroup GroupUse
}

// Spec is the definition of one command of the language: its words, help,
// examples and policy, and how to make an empty value of its type. The
// registry's Specs are shared and must not be modified by callers.
type Spec struct {
	Path     string   // the command words: "mtp steps", "gpu recover", "jobs"
	Usage    string   // the usage line, e.g. "mtp steps N [SERVICE] [--dry-run]", generated
	Summary  string   // one line for the overview
	Details  string   // the longer help text (a paragraph, may be several lines)
	Examples []string // each one parses with a single configured service
	// RoleNote is added after the role in help ("admin with --force").
	RoleNote string
	Policy

	// new returns an empty value of the command's type.
	new func() Command
}

// Group returns the first command word ("mtp" for "mtp steps").
func (s *Spec) Group() string {
	if i := strings.IndexByte(s.Path, ' '); i >= 0 {
		return s.Path[:i]
	}
	return s.Path
}

// SlashCommand returns the Slack slash command the command is typed after: its
// group's own ("/mtp") or SlackCatchAll ("/opsbot").
func (s *Spec) SlashCommand() string { return slashOf(s.Group()) }

// Command is one parsed, validated command: a value of one of this
// package's command types (*MTPSteps, *Jobs, ...). Parse(Text(c)) returns an
// equal Command. Only this package's types implement it.
type Command interface {
	// Spec returns the command's definition.
	Spec() *Spec
	// args binds the value's fields to the argument kinds, in usage order.
	args() []arg
}

// Job is a command that runs as a job on the service's hosts (Policy.Hosts).
// Run is in the job command's own file; see ops.Runbook for what it calls.
type Job interface {
	Command
	// Run runs the command's pipeline: one method of the runbook, with the
	// command's arguments. rb is the runbook of the config in effect, bound
	// to the job's hold; rep receives the pipeline's progress. The Result is
	// non-nil whenever anything was learned or changed, also on error.
	Run(ctx context.Context, rb *ops.Runbook, rep ops.Reporter) (*ops.Result, error)
}

// On is where a command acts: a service and the host that runs it. Commands
// that take a [SERVICE] or [HOST|SERVICE] embed it.
type On struct {
	Service string `json:"service,omitempty"` // the resolved service
	Host    string `json:"host,omitempty"`    // the service's host
	// Replicas are set when Service is a replicated service itself (a
	// command whose Policy.OnGroup is GroupEach): its replicas' service names,
	// each acted on in turn; Host is then "".
	Replicas []string `json:"replicas,omitempty"`
}

// Where returns the service and host c acts on: for gpu status the named
// host (or none, meaning all); the zero On for commands about no service.
func Where(c Command) On {
	for _, a := range c.args() {
		if w, ok := a.(interface{ where() On }); ok {
			return w.where()
		}
	}
	return On{}
}

// Text returns the canonical rendering of c (`mtp steps 10 qwen`): resolved
// names, defaults spelled out, flags last. Used in logs, audit and schedules.
func Text(c Command) string { return render(c) }

// IsDryRun reports whether c is a --dry-run: it shows what would happen and
// changes nothing.
func IsDryRun(c Command) bool {
	for _, a := range c.args() {
		if f, ok := a.(*flagArg); ok && f.def == &flagDryRun {
			return *f.v
		}
	}
	return false
}

// RoleOf returns the role c needs: its Spec's, raised by its arguments where
// the command says so (gpu recover --force needs admin; a schedule needs at
// least what its command needs).
func RoleOf(c Command) Role {
	r := c.Spec().Role
	if rr, ok := c.(interface{ raiseRole(Role) Role }); ok {
		r = rr.raiseRole(r)
	}
	return r
}

// NeedsConfirm reports whether c asks for confirmation: its Spec says so, or
// it schedules a command that does (the creator confirms once, when adding
// the schedule), and it is not a dry run.
func NeedsConfirm(c Command) bool {
	if IsDryRun(c) {
		return false
	}
	if sc, ok := c.(interface{ confirmsFor() Command }); ok {
		if sub := sc.confirmsFor(); sub != nil && NeedsConfirm(sub) {
			return true
		}
	}
	// A rollout is confirmed with its plan, whatever its command's Spec says.
	return c.Spec().Confirm || IsRollout(c)
}

// Mutates reports whether running c changes anything: a mutating command
// and not a dry run.
func Mutates(c Command) bool { return c.Spec().Mutating && !IsDryRun(c) }

// LockedService returns the service c's job must hold exclusively for its
// whole run, or "" when it locks nothing (read-only commands and dry runs).
// The job's pipeline also holds the service's physical node during its
// mutating windows; that lock is the pipeline's, not the command's.
func LockedService(c Command) string {
	if c.Spec().Lock == LockService && !IsDryRun(c) {
		return Where(c).Service
	}
	return ""
}

// Restarts returns how many times c's job restarts its service at most: one
// per value a sweep or a tune tries, 1 for every other command. The runtime
// scales a job's timeout by it.
func Restarts(c Command) int {
	if r, ok := c.(interface{ restarts() int }); ok {
		return max(1, r.restarts())
	}
	return 1
}

// Previewer is implemented by commands that say in one line what they will
// do, for their confirmation; the door has a generic line for the others.
type Previewer interface {
	Preview() string
}

// previewerIn is implemented by commands whose confirmation names what the
// configuration says of their service (the files a change writes).
type previewerIn interface {
	previewIn(opts Options) string
}

// ServiceRef is one configured service and the host that runs it, with what
// a confirmation names of it: its unit, its engine and the adaptive config
// file a per-load change writes (SGLang's; "" for vLLM, or when unknown).
type ServiceRef struct {
	Name, Host             string
	Unit, Engine, Adaptive string
	// Node is the machine that owns its GPUs when that is not Host (its
	// Proxmox node); GPUs are the GPUs it is configured for (none: all).
	// `gpu reset` names the services on the GPUs it resets from them.
	Node string
	GPUs []int
	// Group is the replicated service this one is a replica of (Name is
	// then GROUP@REPLICA); "" for a service without replicas.
	Group string
	// Router is the URL of the router in front of the group's replicas
	// ("" for none), named in a rollout's confirmation.
	Router string
	// ReplicaIndex is a replica's place in its group's replicas as
	// configured (0: the first, a rollout's canary).
	ReplicaIndex int
}

// Options are what Parse needs to know about the configuration.
type Options struct {
	MaxSteps int          // the largest accepted steps value; 0 means DefaultMaxSteps
	Services []ServiceRef // the services, in config order
	Hosts    []string     // every configured host (service hosts are added implicitly)
	// Rollout is how a change of a replicated service rolls out (the
	// config's rollout), shown in the rollout's confirmation.
	Rollout ops.RolloutConfig
	// DefaultService is the service a command means when it names none (the
	// config's default_service). Empty: the only service when exactly one is
	// configured; with several, a command naming none is a usage error.
	DefaultService string
}

// Limits of the language.
const (
	MaxNameLen     = 64   // service and host names
	MaxSweepPoints = 32   // values in a sweep list
	MaxInputLen    = 1024 // bytes of command text
)

func (o *Options) maxSteps() int {
	if o.MaxSteps > 0 {
		return o.MaxSteps
	}
	return DefaultMaxSteps
}

// Validate reports configuration Parse could never serve: names outside the grammar
// ([a-z0-9][a-z0-9._-]*, at most 64), duplicate services, a service without a host,
// a negative MaxSteps, a DefaultService that is not among Services. The config
// package calls it at load time.
func (o Options) Validate() error {
	if o.MaxSteps < 0 {
		return fmt.Errorf("commands options: max steps %d is negative", o.MaxSteps)
	}
	seen := make(map[string]bool, len(o.Services))
	for _, s := range o.Services {
		if !ValidServiceName(s.Name) || GroupOf(s.Name) != s.Group {
			return fmt.Errorf("commands options: service name %q: want [a-z0-9][a-z0-9._-]*, at most %d characters, or GROUP@REPLICA for a replica of group %q",
				s.Name, MaxNameLen, s.Group)
		}
		if seen[s.Name] {
			return fmt.Errorf("commands options: service %q is listed twice", s.Name)
		}
		seen[s.Name] = true
		if !ValidName(s.Host) {
			return fmt.Errorf("commands options: service %q: host name %q: want [a-z0-9][a-z0-9._-]*, at most %d characters", s.Name, s.Host, MaxNameLen)
		}
	}
	for _, h := range o.Hosts {
		if !ValidName(h) {
			return fmt.Errorf("commands options: host name %q: want [a-z0-9][a-z0-9._-]*, at most %d characters", h, MaxNameLen)
		}
	}
	for _, s := range o.Services {
		if seen[s.Group] {
			return fmt.Errorf("commands options: %q is both a service and a replicated service", s.Group)
		}
	}
	if o.DefaultService != "" && !seen[o.DefaultService] && !o.replicated(o.DefaultService) {
		return fmt.Errorf("commands options: default service %q is not a configured service", o.DefaultService)
	}
	return nil
}

// replicated reports whether name is a replicated service of o.
func (o Options) replicated(name string) bool {
	for _, s := range o.Services {
		if s.Group != "" && s.Group == name {
			return true
		}
	}
	return false
}

// ValidName reports whether s is a service or host name of the grammar:
// [a-z0-9][a-z0-9._-]*, 1 to 64 characters.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}
