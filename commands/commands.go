// Package commands is opsbot's command language: the words people type in Slack
// (`/mtp steps 10`), Matrix (`!mtp steps 10`) or a terminal (`mtp steps 10`).
//
// One typed registry (Specs) drives everything about a command: how it is parsed and
// validated, its usage line and help text, the role it needs, whether it mutates a
// host or the schedules, whether it asks for confirmation and what it locks. Parse
// turns text into a *Command or a *UsageError that says what was wrong, the usage
// line and a suggestion; nothing else in opsbot interprets command text.
//
// The package is pure: no I/O, no clock, no globals that change, safe for concurrent
// use. The one exception is validating a cron spec's CRON_TZ= zone, which loads the
// zone from the embedded time zone database (time/tzdata) when the system has none.
package commands

import (
	"fmt"
	"strings"
	"time"

	_ "time/tzdata" // CRON_TZ= zones validate the same on hosts without /usr/share/zoneinfo
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
	LockService             // one such job per service at a time (Command.Service)
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

// Spec is one command of the language. The registry's Specs are shared and must not
// be modified by callers.
type Spec struct {
	Path     string   // the command words: "mtp steps", "gpu recover", "jobs"
	Usage    string   // the usage line, e.g. "mtp steps N [SERVICE] [--dry-run]"
	Summary  string   // one line for the overview
	Role     Role     // the role needed (Command.Role may raise it, e.g. --force)
	Mutating bool     // changes a host or the schedules; accepts --dry-run
	Confirm  bool     // asks for confirmation before it runs (not for a dry run)
	Lock     Lock     // what its job locks (not for a dry run)
	Examples []string // each one parses with a single configured service
	// Schedulable is true for job commands that `schedule add` accepts.
	Schedulable bool
	// Details is the longer help text (a paragraph, may be several lines).
	Details string

	params  []param // positional arguments, in order
	targets bool    // takes --to TARGETS (schedule add)
	keys    []key   // key=N arguments, in any order
	flags   flagBit // accepted flags (--dry-run is implied by Mutating)
}

// Group returns the first command word ("mtp" for "mtp steps").
func (s *Spec) Group() string {
	if i := strings.IndexByte(s.Path, ' '); i >= 0 {
		return s.Path[:i]
	}
	return s.Path
}

// Specs returns the registry in help order. The Specs are shared: do not modify them.
func Specs() []*Spec {
	out := make([]*Spec, len(registry))
	copy(out, registry)
	return out
}

// Lookup returns the Spec with exactly this path ("svc logs"), or nil.
func Lookup(path string) *Spec {
	for _, s := range registry {
		if s.Path == path {
			return s
		}
	}
	return nil
}

// ServiceRef is one configured service and the host that runs it.
type ServiceRef struct{ Name, Host string }

// Options are what Parse needs to know about the configuration.
type Options struct {
	MaxSteps int          // the largest accepted steps value; 0 means DefaultMaxSteps
	Services []ServiceRef // the services, in config order
	Hosts    []string     // every configured host (service hosts are added implicitly)
	// DefaultService is the service a command means when it names none (the
	// config's default_service). Empty: the only service when exactly one is
	// configured; with several, a command naming none is a usage error.
	DefaultService string
}

// DefaultMaxSteps is the steps limit when Options.MaxSteps is 0, and the one
// home of that limit: the config and the ops layer default to it.
const DefaultMaxSteps = 16

// DefaultBench returns the benchmark knobs of a job when neither the command
// nor the config sets them: 16 prompts, one at a time, 256 tokens in, 256 out.
// It is their one home: the config and the ops layer default to them.
func DefaultBench() BenchParams {
	return BenchParams{Prompts: 16, Concurrency: 1, InputLen: 256, OutputLen: 256}
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
		if !ValidName(s.Name) {
			return fmt.Errorf("commands options: service name %q: want [a-z0-9][a-z0-9._-]*, at most %d characters", s.Name, MaxNameLen)
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
	if o.DefaultService != "" && !seen[o.DefaultService] {
		return fmt.Errorf("commands options: default service %q is not a configured service", o.DefaultService)
	}
	return nil
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

// BenchParams are the benchmark knobs; 0 means the configured default.
type BenchParams struct {
	Prompts, Concurrency, InputLen, OutputLen int
}

// Command is one parsed, validated command. Parse(c.Text) returns an equal Command.
type Command struct {
	Spec *Spec
	// Text is the canonical rendering (`mtp steps 10 qwen`): resolved names,
	// defaults spelled out, flags last. Used in logs, audit and schedules.
	Text string

	Service string // resolved service ("" where the command has none)
	Host    string // the service's host; for gpu status the named host or "" for all

	DryRun  bool // --dry-run: show what would happen, change nothing
	Force   bool // gpu recover --force
	NoStart bool // gpu recover --no-start
	All     bool // jobs all

	Steps      int         // mtp steps N
	Lines      int         // svc logs lines=N (default 50)
	Bench      BenchParams // bench key=N arguments
	SweepSteps []int       // sweep steps LIST, in the order given, no duplicates
	SweepTopK  []int       // sweep ... topk LIST: SGLang topk values; nil = the unit's
	SweepDraft []int       // sweep ... draft LIST: draft token counts for each topk above 1; nil = the unit's
	SweepAt    []int       // sweep ... at LIST: concurrencies, in the order given; nil = the configured one
	ApplyBest  bool        // sweep --apply-best: leave the service on the best point
	TuneFrom   int         // mtp tune RANGE: the lowest steps searched (default 1)
	TuneTo     int         // mtp tune RANGE: the highest steps searched (default min(16, the steps limit))
	// PerLoad is mtp tune per-load: the best steps at each concurrency of
	// SweepAt (two or more, ascending).
	PerLoad bool
	// LoadTable is mtp per-load's TABLE, concurrencies ascending.
	LoadTable  []LoadSteps
	Cron       string   // schedule add: the canonical cron spec (whitespace collapsed)
	Sub        *Command // schedule add: the scheduled job command
	ScheduleID int64    // schedule rm/pause/resume ID
	JobID      int64    // cancel JOB, job JOB
	N          int      // history n=N (default 10)
	// To are schedule add's --to TARGETS, canonical ("slack:C0OPS,matrix:!r:hs");
	// empty: the room the command came from.
	To         string
	Duration   time.Duration // watchdog silence DURATION
	IncidentID int64         // ack INCIDENT
	Topic      string        // help: "" for the overview, else a group or path ("mtp", "mtp steps")
}

// Role returns the role this command needs: the Spec's, raised to Admin by
// gpu recover --force, and never lower than a scheduled Sub command's.
func (c *Command) Role() Role {
	r := c.Spec.Role
	if c.Force && r < Admin {
		r = Admin
	}
	if c.Sub != nil {
		if sr := c.Sub.Role(); sr > r {
			r = sr
		}
	}
	return r
}

// NeedsConfirm reports whether the command asks for confirmation: its Spec says so,
// or it schedules a command whose Spec says so (the creator confirms once, when
// adding the schedule), and it is not a dry run.
func (c *Command) NeedsConfirm() bool {
	if c.DryRun {
		return false
	}
	return c.Spec.Confirm || (c.Sub != nil && c.Sub.NeedsConfirm())
}

// Mutates reports whether running the command changes anything: a mutating Spec
// and not a dry run.
func (c *Command) Mutates() bool { return c.Spec.Mutating && !c.DryRun }

// LockedService returns the service the command's job must hold exclusively for
// its whole run, or "" when it locks nothing (read-only commands and dry runs).
// The job's pipeline also holds the service's physical node during its mutating
// windows; that lock is the pipeline's, not the command's.
func (c *Command) LockedService() string {
	if c.Spec.Lock == LockService && !c.DryRun {
		return c.Service
	}
	return ""
}

// String returns c.Text.
func (c *Command) String() string { return c.Text }

// LoadSteps is one entry of mtp per-load's TABLE: the steps for a
// concurrency, then other candidates the engine may move between.
type LoadSteps struct {
	Concurrency int
	Steps       []int // at least one; the first is the steps for the concurrency
}
