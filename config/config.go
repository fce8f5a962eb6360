// Package config reads opsbot's YAML configuration: hosts, services, auth, the
// store and the chat adapters. Secrets come from ${ENV} references or from
// files and are never printed: Redacted renders the effective configuration with
// every secret replaced.
//
// Load validates everything before returning; a config that loads is one the
// bot can run with (hosts that services name exist, roles are known, ...).
// Every problem is reported at once, each naming its key path
// (services.qwen.url); errors never quote the value of a secret. An adapter
// that is not enabled is not checked and needs no secrets.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opsbot/opsbot/commands"
)

// Config is the whole configuration file.
type Config struct {
	Store    Store              `yaml:"store"`
	SSH      SSH                `yaml:"ssh"`
	Hosts    map[string]Host    `yaml:"hosts"`
	Services map[string]Service `yaml:"services"`
	// DefaultService names the service a command means when it names none;
	// unset, the only service when exactly one is configured.
	DefaultService string  `yaml:"default_service,omitempty"`
	Auth           Auth    `yaml:"auth"`
	Limits         Limits  `yaml:"limits"`
	Bench          Bench   `yaml:"bench"`
	Sweep          Sweep   `yaml:"sweep,omitempty"`
	Alerts         Alerts  `yaml:"alerts,omitempty"`
	Slack          *Slack  `yaml:"slack,omitempty"`
	Matrix         *Matrix `yaml:"matrix,omitempty"`
	// HTTP is `opsbot serve`'s own listener: health, readiness, metrics and
	// the adapters' HTTP deliveries.
	HTTP HTTP `yaml:"http,omitempty"`
	Log  Log  `yaml:"log,omitempty"`
	// Timezone is the IANA zone of cron specs without CRON_TZ= and of
	// `schedule list` (default UTC).
	Timezone  string     `yaml:"timezone,omitempty"`
	Schedules []Schedule `yaml:"schedules,omitempty"`
	Watchdog  Watchdog   `yaml:"watchdog,omitempty"`
	// Rollout is how a change to a replicated service rolls out.
	Rollout Rollout `yaml:"rollout,omitempty"`

	// Dir is the directory of the config file; relative paths are resolved against it.
	Dir string `yaml:"-"`
	// File is the config file's absolute path ("" for a config parsed from
	// text): where an operator changes what the config decides.
	File string `yaml:"-"`
	// Warnings are what Load found worth saying that does not stop opsbot:
	// a group-writable known_hosts, a secret others may read (trust.go).
	// `config check` prints them; a start logs them.
	Warnings []string `yaml:"-" json:"-"`

	literalSecrets []string // keys of secrets written in the file itself
	envSecrets     []string // environment variables the secrets come from
}

// HTTP configures `opsbot serve`'s HTTP listener.
type HTTP struct {
	// Listen is HOST:PORT for GET /healthz, /readyz, /metrics and the
	// adapters' routes; empty, nothing listens.
	Listen string `yaml:"listen,omitempty"`
	// TrustedProxies are CIDRs of the reverse proxies in front of the
	// listener: a request from one of them counts against the client its
	// X-Forwarded-For names (the right-most address that is not a trusted
	// proxy's), not against the proxy. From any other peer the header is
	// ignored.
	TrustedProxies []string `yaml:"trusted_proxies,omitempty"`
}

// TrustedPrefixes are TrustedProxies parsed (Validate has checked them;
// one that does not parse is left out).
func (h HTTP) TrustedPrefixes() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range h.TrustedProxies {
		if p, err := netip.ParsePrefix(s); err == nil {
			ps = append(ps, p.Masked())
		}
	}
	return ps
}

// Log configures the log `opsbot serve` writes to stderr.
type Log struct {
	// Format is "text" (default) or "json".
	Format string `yaml:"format,omitempty"`
	// Level is "debug", "info" (default), "warn" or "error".
	Level string `yaml:"level,omitempty"`
}

// SSH holds the client settings shared by every host.
type SSH struct {
	KeyFile    string `yaml:"key_file"`
	KnownHosts string `yaml:"known_hosts"`
	// ConnectTimeout bounds the TCP connect (default DefaultSSHConnectTimeout).
	ConnectTimeout Duration `yaml:"connect_timeout,omitempty"`
	// KeepAlive is the interval of keepalive@openssh.com requests on each
	// connection (default DefaultSSHKeepAlive).
	KeepAlive Duration `yaml:"keepalive,omitempty"`
}

// Limits bound what commands may ask for.
type Limits struct {
	MaxSteps   int      `yaml:"max_steps,omitempty"`
	JobTimeout Duration `yaml:"job_timeout,omitempty"`
	// ConfirmTTL is how long a confirmation prompt stays valid.
	ConfirmTTL Duration `yaml:"confirm_ttl,omitempty"`
	// LeaseTTL is how long a service or node lease outlives the last
	// heartbeat of the opsbot process holding it: a holder that died is taken
	// over after at most this long. Heartbeats run every LeaseTTL/3.
	LeaseTTL Duration `yaml:"lease_ttl,omitempty"`
	// ShutdownGrace is how long `opsbot serve` lets running jobs reach a
	// safe point after SIGTERM before it stops them. Default 60s.
	ShutdownGrace Duration `yaml:"shutdown_grace,omitempty"`
	// StrandedAfter is how long GPU memory no process holds may stay
	// without falling before `gpu recover` calls it stranded and offers a
	// GPU reset. Default 10s.
	StrandedAfter Duration `yaml:"stranded_after,omitempty"`
}

// Bench holds the benchmark defaults used when a command does not say.
type Bench struct {
	Prompts     int `yaml:"prompts,omitempty"`
	Concurrency int `yaml:"concurrency,omitempty"`
	InputLen    int `yaml:"input_len,omitempty"`
	OutputLen   int `yaml:"output_len,omitempty"`
}

// Sweep configures sweep reports.
type Sweep struct {
	// Metric is the figure a sweep's best point is chosen by: one of
	// SweepMetrics (default output_tok_s).
	Metric string `yaml:"metric,omitempty"`
}

// SweepMetrics are the values sweep.metric takes, the default first.
var SweepMetrics = []string{"output_tok_s", "per_stream_tok_s", "accept_len"}

// Alerts configures regression alerts: a scheduled sweep or bench in which
// a setting at a concurrency (a bucket) has an output tok/s or accept length
// more than RegressionPct percent below the median of its last
// RegressionRuns comparable runs (same service, settings and load) posts an
// alert naming the bucket, the setting and the figure.
type Alerts struct {
	RegressionPct  int `yaml:"regression_pct,omitempty"`  // default DefaultRegressionPct
	RegressionRuns int `yaml:"regression_runs,omitempty"` // default DefaultRegressionRuns
}

// EnabledAdapters names the chat adapters the config enables, sorted:
// "matrix", "slack".
func (c *Config) EnabledAdapters() []string {
	var on []string
	if c.Matrix != nil && c.Matrix.Enabled {
		on = append(on, "matrix")
	}
	if c.Slack != nil && c.Slack.Enabled {
		on = append(on, "slack")
	}
	return on
}

// Path resolves p against the config file's directory.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// Error lists every problem found in a config.
type Error struct{ Problems []error }

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid config:")
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap exposes the individual problems to errors.Is/As.
func (e *Error) Unwrap() []error { return e.Problems }

// Redacted renders the effective configuration as YAML with every secret replaced.
func (c *Config) Redacted() ([]byte, error) {
	cp := *c
	if c.Slack != nil {
		s := *c.Slack
		s.BotToken, s.AppToken, s.SigningSecret = redact(s.BotToken), redact(s.AppToken), redact(s.SigningSecret)
		cp.Slack = &s
	}
	if c.Matrix != nil {
		m := *c.Matrix
		m.AccessToken, m.Password, m.RecoveryKey = redact(m.AccessToken), redact(m.Password), redact(m.RecoveryKey)
		cp.Matrix = &m
	}
	cp.Store.URL = redact(c.Store.URL)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&cp); err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	return buf.Bytes(), nil
}

func redact(s Secret) Secret {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// ServiceNames returns the names of the services opsbot acts on, sorted:
// the Instances' (a replicated service's replicas as GROUP@REPLICA, not
// the service itself).
func (c *Config) ServiceNames() []string {
	ins := c.Instances()
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.Name
	}
	return out
}

// NamedServices returns every name a grant, a rule or default_service may
// name, sorted: the services as configured (a replicated service among
// them, meaning each of its replicas) and each replica, GROUP@REPLICA.
func (c *Config) NamedServices() []string {
	out := c.ServiceNames()
	for name, s := range c.Services {
		if len(s.Replicas) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// HostNames returns the configured host names, sorted.
func (c *Config) HostNames() []string { return sortedKeys(c.Hosts) }

// ErrNoService is returned by Service for an unknown name.
var ErrNoService = errors.New("no such service")

// Service returns the named service: one opsbot acts on (an instance, a
// replica's with what it shares with its group filled in).
func (c *Config) Service(name string) (Service, error) {
	in, ok := c.Instance(name)
	if !ok {
		return Service{}, fmt.Errorf("%w: %q", ErrNoService, name)
	}
	return in.Service, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CommandOptions are what parsing a chat command needs from the config: the
// steps limit, the services with their hosts (and, for confirmations, their
// units, engines and adaptive config files; for replicas, their group), the
// hosts, default_service.
func (c *Config) CommandOptions() commands.Options {
	opts := commands.Options{MaxSteps: c.Limits.MaxSteps, Hosts: c.HostNames(), DefaultService: c.DefaultService, Rollout: c.OpsRollout()}
	for _, in := range c.Instances() {
		s := in.Service
		ref := commands.ServiceRef{Name: in.Name, Host: s.Host, Unit: s.Unit, Engine: s.Engine, GPUs: s.GPUs, Group: in.Group, ReplicaIndex: in.ReplicaIndex}
		if in.Group != "" {
			if r := c.Services[in.Group].Router; r != nil {
				ref.Router = r.URL
			}
		}
		if s.Proxmox != nil {
			ref.Node = s.Proxmox.Node
		}
		if s.Engine != "vllm" {
			ref.Adaptive = s.AdaptiveConfigPath(in.Name)
		}
		opts.Services = append(opts.Services, ref)
	}
	return opts
}
