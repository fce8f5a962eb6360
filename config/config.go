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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
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

// Store says which database opsbot keeps its state in and how long it keeps
// history. Driver "sqlite" (the default) keeps it in the file Path; driver
// "postgres" in the PostgreSQL database URL names, which several opsbot
// processes on several machines share. Path is for sqlite only and URL for
// postgres only: Validate refuses the other by name.
type Store struct {
	// Driver is "sqlite" (default) or "postgres".
	Driver string `yaml:"driver,omitempty"`
	// Path is the SQLite file (driver sqlite).
	Path string `yaml:"path,omitempty"`
	// URL is the PostgreSQL connection string (driver postgres), a
	// postgres:// URL or key=value pairs, written literally, as ${ENV} or as
	// file:/path. It may hold a password: a secret, never printed.
	URL Secret `yaml:"url,omitempty"`
	// MaxConns bounds the connections to PostgreSQL (driver postgres).
	// Default DefaultStoreMaxConns.
	MaxConns int `yaml:"max_conns,omitempty"`
	// Retention is how long job events and audit entries are kept; older
	// ones are pruned once a day by `opsbot serve`. Default 90d.
	Retention Duration `yaml:"retention,omitempty"`
}

// HTTP configures `opsbot serve`'s HTTP listener.
type HTTP struct {
	// Listen is HOST:PORT for GET /healthz, /readyz, /metrics and the
	// adapters' routes; empty, nothing listens.
	Listen string `yaml:"listen,omitempty"`
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
	KeyFile        string   `yaml:"key_file"`
	KnownHosts     string   `yaml:"known_hosts"`
	ConnectTimeout Duration `yaml:"connect_timeout,omitempty"`
	KeepAlive      Duration `yaml:"keepalive,omitempty"`
}

// Host is one machine reached over SSH.
type Host struct {
	Addr string `yaml:"addr"`
	User string `yaml:"user"`
	// Jump names another host to reach this one through.
	Jump string `yaml:"jump,omitempty"`
	// Prefix is put before every command run on the host, as argv words: for
	// a container without its own SSH, e.g. [pct, exec, "129", "--"] on its node.
	Prefix []string `yaml:"prefix,omitempty"`
}

// Proxmox says that a service's host is an LXC container on a Proxmox node:
// processes holding GPU memory are killed from the node with host PIDs.
type Proxmox struct {
	Node string `yaml:"node"`
	VMID int    `yaml:"vmid"`
}

// Service is one inference server under systemd.
type Service struct {
	Host    string   `yaml:"host"`
	Unit    string   `yaml:"unit"`
	URL     string   `yaml:"url"`
	Engine  string   `yaml:"engine,omitempty"` // sglang (default) or vllm
	Proxmox *Proxmox `yaml:"proxmox,omitempty"`
	GPUs    []int    `yaml:"gpus,omitempty"`
	// Edit is how unit changes are deployed: "in-place" (default) or "drop-in".
	Edit string `yaml:"edit,omitempty"`
	// ReadyTimeout bounds the wait for the engine to serve after a start.
	ReadyTimeout Duration `yaml:"ready_timeout,omitempty"`
	// ClearMiB is the per-GPU memory below which a GPU counts as clear.
	ClearMiB int `yaml:"clear_mib,omitempty"`
	// DefaultSteps is where a sweep leaves the service; 0 = where it was.
	DefaultSteps int `yaml:"default_steps,omitempty"`
	// AdaptiveConfig is the path, on the service's host, of SGLang's adaptive
	// speculative config file that a per-load tune writes next to the unit;
	// "" = AdaptiveConfigDefault(name).
	AdaptiveConfig string `yaml:"adaptive_config,omitempty"`
	// AutoRecover lets the watchdog run `gpu recover` on a restart loop or a
	// down service by itself instead of offering it.
	AutoRecover bool `yaml:"auto_recover,omitempty"`
	// ViaSSH reaches URL through the SSH connection to Host (a direct-tcpip
	// channel, dialled from the host's side: 127.0.0.1 is the host's own
	// loopback) for every use of it: readiness, /server_info, the cache
	// flush, metrics, the benchmark, the watchdog and `opsbot bench
	// --service`. The host's sshd needs AllowTcpForwarding yes (or local).
	ViaSSH bool `yaml:"via_ssh,omitempty"`
}

// Schedule is a command the config runs on a cron schedule.
type Schedule struct {
	// Cron is a standard 5-field spec, a descriptor or @every D, optionally
	// prefixed by CRON_TZ=Zone.
	Cron string `yaml:"cron"`
	// Command is a schedulable job command ("sweep qwen steps 1..5").
	Command string `yaml:"command"`
	// As is the auth key the runs are authorised as ("slack:U024BE7LH"): each
	// run needs that user to hold the command's role at run time.
	As string `yaml:"as"`
	// To are the rooms the runs report to: "slack:C0OPS,matrix:!room:hs".
	To string `yaml:"to"`
	// Missed says what a run missed while no opsbot was up becomes: "run"
	// (once, at start) or "skip" (default).
	Missed string `yaml:"missed,omitempty"`
}

// Schedule missed-run policies.
const (
	MissedRun  = "run"
	MissedSkip = "skip"
)

// Watchdog configures the watch over every service's state.
type Watchdog struct {
	// Interval between passes (default DefaultWatchdogInterval).
	Interval Duration `yaml:"interval,omitempty"`
	// To are the rooms alerts go to ("slack:C0OPS,matrix:!room:hs"); unset,
	// the Slack channel and the first Matrix room.
	To string `yaml:"to,omitempty"`
	// Remind is how long an unacknowledged alert waits between reminders
	// (default DefaultWatchdogRemind, at least a minute).
	Remind Duration `yaml:"remind,omitempty"`
}

// DefaultWatchdogInterval is how often the watchdog looks when
// watchdog.interval is unset.
const DefaultWatchdogInterval = time.Minute

// DefaultWatchdogRemind is watchdog.remind when unset.
const DefaultWatchdogRemind = 30 * time.Minute

// Auth maps platform user ids to roles. Keys of Users are "platform:id", e.g.
// "slack:U024BE7LH", "matrix:@alice:example.org", "console:alice".
type Auth struct {
	// DefaultRole is the role of users not listed: "none" (default), "viewer",
	// "operator" or "admin".
	DefaultRole string            `yaml:"default_role,omitempty"`
	Users       map[string]string `yaml:"users,omitempty"`
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

// Regression alert defaults.
const (
	DefaultRegressionPct  = 10
	DefaultRegressionRuns = 7
)

// Slack configures the Slack adapter. In Socket Mode (the default) the bot
// dials Slack with AppToken and needs no public URL; in HTTP mode Slack posts
// to POST /slack/events on http.listen, signed with SigningSecret.
type Slack struct {
	Enabled bool `yaml:"enabled"`
	// Mode is SlackModeSocket (default) or SlackModeHTTP.
	Mode          string `yaml:"mode,omitempty"`
	BotToken      Secret `yaml:"bot_token"`
	AppToken      Secret `yaml:"app_token,omitempty"`      // socket mode: xapp-...
	SigningSecret Secret `yaml:"signing_secret,omitempty"` // http mode
	// APIURL is the Slack Web API base, ending in "/"; unset, Slack's own
	// (https://slack.com/api/).
	APIURL string `yaml:"api_url,omitempty"`
	// Channel is the channel id scheduled reports and alerts go to.
	Channel string `yaml:"channel,omitempty"`
	// Channels are the channel ids commands are taken from; a command
	// anywhere else is refused.
	Channels []string `yaml:"channels,omitempty"`
	// AllowDMs lets users run commands in a direct message with the bot.
	AllowDMs bool `yaml:"allow_dms,omitempty"`
}

// Slack modes.
const (
	SlackModeSocket = "socket"
	SlackModeHTTP   = "http"
)

// slackIDRE matches Slack's ids of channels, users and user groups.
var slackIDRE = regexp.MustCompile(`^[A-Z0-9]{2,32}$`)

// Matrix configures the Matrix adapter.
type Matrix struct {
	Enabled bool `yaml:"enabled"`
	// Homeserver is the client-server API's base URL, http(s)://HOST[:PORT].
	Homeserver string `yaml:"homeserver"`
	// UserID is the bot's account, "@opsbot:example.org".
	UserID string `yaml:"user_id"`
	// AccessToken, or Password: with a password the bot logs in once and
	// keeps the device id and access token it got in the store.
	AccessToken Secret `yaml:"access_token,omitempty"`
	Password    Secret `yaml:"password,omitempty"`
	// Rooms are the room ids ("!abc:example.org") the bot joins and obeys;
	// invites to other rooms are declined, commands there ignored.
	Rooms []string `yaml:"rooms"`
	// StaleAfter: a command older than this when the bot first sees it (it
	// was sent while the bot was down) is answered "stale, not run".
	StaleAfter Duration `yaml:"stale_after,omitempty"`
	// PowerLevels grants roles from the sender's power level in the room
	// where the command (or the reaction) is sent, as the room's
	// m.room.power_levels state says: {operator: 50, admin: 100} makes a
	// member at level 50 or more an operator and one at 100 or more an
	// admin there. Keys are roles (viewer, operator, admin; any subset),
	// values Matrix power levels; a higher role needs a level at least as
	// high as a lower one's (at equal levels the higher role is granted). A
	// user holds the highest of this role and the one auth gives their id.
	PowerLevels map[string]int `yaml:"power_levels,omitempty"`
	// Encryption turns on end-to-end encryption: the bot reads and writes
	// encrypted rooms as its own device, its keys kept in the store. It
	// needs a binary built with -tags goolm (MatrixEncryptionBuilt); other
	// builds refuse true.
	Encryption bool `yaml:"encryption,omitempty"`
}

// DefaultMatrixStaleAfter is matrix.stale_after when unset.
const DefaultMatrixStaleAfter = 5 * time.Minute

// Secret is a value that is never printed. In YAML it is either a literal, a
// "${ENV_VAR}" reference, or a "file:/path" reference whose content (trimmed) is
// the value.
type Secret string

// String returns a redacted form so secrets never reach logs by accident.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// LogValue keeps the secret out of logs, JSON ones included.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON writes the secret redacted, so a config (or a part of one)
// logged or encoded as JSON never shows it.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Value returns the secret itself.
func (s Secret) Value() string { return string(s) }

// Duration is a time.Duration written as "30s", "5m" in YAML.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration must be a string like 30s or 5m", n.Line)
	}
	v, err := ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: invalid duration %q (use e.g. 30s, 5m, 1h, 90d)", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// ParseDuration parses a Go duration ("30s", "1h30m") or a whole number of
// days ("90d").
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.Atoi(days)
		if err != nil || n > 100000 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// MarshalYAML writes the duration as a string, as String does.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String writes the duration the way an operator does, in a form
// ParseDuration reads back: whole days as "90d", else Go's form without its
// zero units ("2m", "1h30m", "36h", "1.5s"); zero is "0s".
func (d Duration) String() string {
	v := time.Duration(d)
	const day = 24 * time.Hour
	if v > 0 && v%day == 0 {
		return strconv.FormatInt(int64(v/day), 10) + "d"
	}
	s := v.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Defaults applied by Load when a field is unset.
const (
	DefaultMaxSteps     = commands.DefaultMaxSteps
	DefaultJobTimeout   = 30 * time.Minute
	DefaultConfirmTTL   = 2 * time.Minute
	DefaultLeaseTTL     = 30 * time.Second
	DefaultReadyTimeout = 15 * time.Minute
	DefaultClearMiB     = 1024
	// DefaultShutdownGrace is limits.shutdown_grace when unset.
	DefaultShutdownGrace = 60 * time.Second
	// DefaultStoreMaxConns is store.max_conns when unset.
	DefaultStoreMaxConns = 8
	// DefaultRetention is store.retention when unset.
	DefaultRetention = 90 * 24 * time.Hour
)

// Load reads, expands and validates the config file at path. A file that
// every user may write is refused: opsbot acts as root on the hosts it names.
// Invalid configs return a *Error listing every problem.
func Load(path string) (*Config, error) {
	c, err := Inspect(path)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Inspect reads the config file at path as Load does, and returns what it
// could read together with every problem found (a *Error, or another error
// when the file cannot be read at all). It is for tools that report more
// problems of their own (`opsbot config check`); a config that came with a
// *Error must not be run.
func Inspect(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, problems := parse(data, filepath.Dir(abs), os.LookupEnv)
	if fi, err := os.Stat(path); err != nil {
		problems = append([]error{fmt.Errorf("read config: %w", err)}, problems...)
	} else if fi.Mode().Perm()&0o002 != 0 {
		problems = append([]error{worldWritable(path, fi, "what opsbot does as root on your hosts")}, problems...)
	}
	problems = append(problems, c.trust(path)...)
	c.File = abs
	if len(problems) > 0 {
		return c, &Error{Problems: problems}
	}
	return c, nil
}

// LabKeys are the top-level keys the lab supplies to a config given with
// --lab: the config file must not set them, except the LabServiceKeys of
// the lab's services.
var LabKeys = []string{"ssh", "hosts", "services", "default_service", "bench"}

// LabServiceKeys are the keys of a supplied service that a config file on
// top of the lab's may still set (services.qwen.auto_recover: true): the
// watchdog's options, which the lab has no opinion on. Every other key of
// a service stays the lab's.
var LabServiceKeys = []string{"auto_recover"}

// LoadOver reads the config file at path as Load does, on top of base (the
// text of a config whose paths are absolute, such as the lab's): base
// supplies the top-level keys in supplied, which the file must not set (a
// problem naming the key and the file) but for the LabServiceKeys of base's
// services, and every other top-level key the file leaves out. Relative
// paths in the file resolve against its directory.
func LoadOver(path string, base []byte, supplied []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var problems []error
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o002 != 0 {
		problems = append(problems, worldWritable(path, fi, "what opsbot does as root on your hosts"))
	}
	top, err := decodeNode(data)
	if err != nil {
		return nil, &Error{Problems: []error{err}}
	}
	under, err := decodeNode(base)
	if err != nil {
		return nil, fmt.Errorf("base config: %w", err)
	}
	if top.Kind == 0 {
		top = &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	m := top.Content[0]
	if m.Kind != yaml.MappingNode || under.Kind == 0 || under.Content[0].Kind != yaml.MappingNode {
		return Load(path) // reports the shape of the file
	}
	has := topKeys(m)
	problems = append(problems, suppliedSet(path, m, supplied)...)
	b := under.Content[0]
	if i := keyIndex(m, "services"); i >= 0 && slices.Contains(supplied, "services") {
		// The file's services only add LabServiceKeys to base's.
		merged, ps := overServices(path, m.Content[i+1], b)
		problems = append(problems, ps...)
		m.Content[i+1] = merged
	}
	for i := 0; i+1 < len(b.Content); i += 2 {
		if _, ok := has[b.Content[i].Value]; !ok {
			m.Content = append(m.Content, b.Content[i], b.Content[i+1])
		}
	}
	c, ps := parseNode(top, filepath.Dir(abs), os.LookupEnv)
	c.File = abs
	problems = append(problems, ps...)
	problems = append(problems, c.trust(path)...)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return c, nil
}

func topKeys(m *yaml.Node) map[string]int {
	has := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		has[m.Content[i].Value] = m.Content[i].Line
	}
	return has
}

// keyIndex returns the index in mapping m of key's key node, or -1.
func keyIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}

// suppliedSet reports the keys of supplied that the top-level mapping m of
// the file at path sets; for services, the keys of a service other than
// LabServiceKeys.
func suppliedSet(path string, m *yaml.Node, supplied []string) []error {
	var problems []error
	for _, k := range supplied {
		i := keyIndex(m, k)
		if i < 0 {
			continue
		}
		if v := m.Content[i+1]; k == "services" && v.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(v.Content); j += 2 {
				name, svc := v.Content[j].Value, v.Content[j+1]
				if svc.Kind != yaml.MappingNode {
					problems = append(problems, labServiceKey(path, "services."+name, v.Content[j].Line))
					continue
				}
				for n := 0; n+1 < len(svc.Content); n += 2 {
					if key := svc.Content[n].Value; !slices.Contains(LabServiceKeys, key) {
						problems = append(problems, labServiceKey(path, "services."+name+"."+key, svc.Content[n].Line))
					}
				}
			}
			continue
		}
		problems = append(problems, fmt.Errorf("%s: set in %s (line %d), but --lab supplies it (and %s): remove it from the file, or run without --lab",
			k, path, m.Content[i].Line, strings.Join(supplied, ", ")))
	}
	return problems
}

func labServiceKey(path, key string, line int) error {
	return fmt.Errorf("%s: set in %s (line %d), but --lab supplies its services: of a lab service the file may set only %s (the watchdog's options); remove it from the file, or run without --lab",
		key, path, line, strings.Join(LabServiceKeys, ", "))
}

// overServices returns base's services with the LabServiceKeys the file's
// services node sets, and a problem for each service base does not have.
func overServices(path string, file, base *yaml.Node) (*yaml.Node, []error) {
	i := keyIndex(base, "services")
	if i < 0 || base.Content[i+1].Kind != yaml.MappingNode || file.Kind != yaml.MappingNode {
		return file, nil
	}
	merged := base.Content[i+1]
	var names []string
	for j := 0; j+1 < len(merged.Content); j += 2 {
		names = append(names, merged.Content[j].Value)
	}
	var problems []error
	for j := 0; j+1 < len(file.Content); j += 2 {
		name, svc := file.Content[j].Value, file.Content[j+1]
		k := keyIndex(merged, name)
		if k < 0 {
			problems = append(problems, fmt.Errorf("services.%s: set in %s (line %d), but the lab has no service %s (it has %s)",
				name, path, file.Content[j].Line, name, strings.Join(names, ", ")))
			continue
		}
		into := merged.Content[k+1]
		if svc.Kind != yaml.MappingNode || into.Kind != yaml.MappingNode {
			continue // suppliedSet reported it
		}
		for n := 0; n+1 < len(svc.Content); n += 2 {
			if !slices.Contains(LabServiceKeys, svc.Content[n].Value) {
				continue // suppliedSet reported it
			}
			if at := keyIndex(into, svc.Content[n].Value); at >= 0 {
				into.Content[at+1] = svc.Content[n+1]
			} else {
				into.Content = append(into.Content, svc.Content[n], svc.Content[n+1])
			}
		}
	}
	return merged, problems
}

// CheckNotSet reports, as a *Error, the keys of supplied that the config
// file at path sets at its top level: a quick check before starting what
// supplies them (LoadOver checks it again, with everything else).
func CheckNotSet(path string, supplied []string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	top, err := decodeNode(data)
	if err != nil {
		return &Error{Problems: []error{err}}
	}
	if top.Kind == 0 || top.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	if ps := suppliedSet(path, top.Content[0], supplied); len(ps) > 0 {
		return &Error{Problems: ps}
	}
	return nil
}

// Parse decodes config text. dir resolves relative paths; lookup resolves ${ENV}.
// Invalid text returns a *Error listing every problem.
func Parse(data []byte, dir string, lookup func(string) (string, bool)) (*Config, error) {
	c, problems := parse(data, dir, lookup)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return c, nil
}

// parse decodes, resolves, defaults and validates, collecting every problem.
// The Config is never nil.
func parse(data []byte, dir string, lookup func(string) (string, bool)) (*Config, []error) {
	root, err := decodeNode(data)
	if err != nil {
		return &Config{}, []error{err}
	}
	return parseNode(root, dir, lookup)
}

// decodeNode reads YAML text into a node tree; an empty text gives an
// empty node.
func decodeNode(data []byte) (*yaml.Node, error) {
	var root yaml.Node
	err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root)
	switch {
	case errors.Is(err, io.EOF):
		return &yaml.Node{}, nil
	case err != nil:
		// Syntax errors name a line and a construct, never a value.
		return nil, fmt.Errorf("config: %w", err)
	}
	return &root, nil
}

// parseNode is parse for a decoded tree.
func parseNode(rootp *yaml.Node, dir string, lookup func(string) (string, bool)) (*Config, []error) {
	c := &Config{}
	root := *rootp
	var problems []error
	switch {
	case root.Kind == 0: // an empty file: every required key is reported below
	default:
		problems = checkShape(&root)
		if len(problems) == 0 || root.Content[0].Kind == yaml.MappingNode {
			if err := root.Decode(c); err != nil {
				// checkShape accepts only what decodes; should yaml disagree,
				// its message still must not show a value.
				problems = append(problems, fmt.Errorf("config: %s", quotedValue.ReplaceAllString(err.Error(), "(value hidden)")))
			}
		}
	}
	c.Dir = dir
	problems = append(problems, c.resolveSecrets(lookup)...)
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			problems = append(problems, ce.Problems...)
		} else {
			problems = append(problems, err)
		}
	}
	return c, problems
}

var (
	matrixID     = regexp.MustCompile(`^@[^:\s]+:[^\s]+$`)
	matrixRoomID = regexp.MustCompile(`^![^:\s]+:[^\s]+$`)
)

// quotedValue is how yaml quotes a value in its errors.
var quotedValue = regexp.MustCompile("`[^`]*`")

var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

func (c *Config) resolveSecret(name string, s *Secret, lookup func(string) (string, bool)) error {
	v := string(*s)
	switch {
	case v == "":
		return nil
	case envRef.MatchString(v):
		key := envRef.FindStringSubmatch(v)[1]
		c.envSecrets = append(c.envSecrets, key)
		val, ok := lookup(key)
		if !ok || val == "" {
			return fmt.Errorf("%s refers to ${%s}, which is not set in the environment", name, key)
		}
		*s = Secret(val)
	case strings.HasPrefix(v, "file:"):
		p := c.Path(strings.TrimPrefix(v, "file:"))
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("%s: read secret file: %w", name, err)
		}
		*s = Secret(strings.TrimSpace(string(b)))
	default:
		c.literalSecrets = append(c.literalSecrets, name)
	}
	return nil
}

// resolveSecrets resolves the secrets of the enabled adapters; a disabled
// adapter needs none, so its references are left as written.
func (c *Config) resolveSecrets(lookup func(string) (string, bool)) []error {
	type ref struct {
		name string
		s    *Secret
	}
	var refs []ref
	if c.Slack != nil && c.Slack.Enabled {
		refs = append(refs, ref{"slack.bot_token", &c.Slack.BotToken}, ref{"slack.app_token", &c.Slack.AppToken},
			ref{"slack.signing_secret", &c.Slack.SigningSecret})
	}
	if c.Matrix != nil && c.Matrix.Enabled {
		refs = append(refs, ref{"matrix.access_token", &c.Matrix.AccessToken}, ref{"matrix.password", &c.Matrix.Password})
	}
	if c.Store.Driver == StorePostgres {
		refs = append(refs, ref{"store.url", &c.Store.URL})
	}
	var errs []error
	for _, r := range refs {
		if err := c.resolveSecret(r.name, r.s, lookup); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
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

func (c *Config) applyDefaults() {
	if c.Slack != nil && c.Slack.Mode == "" {
		c.Slack.Mode = SlackModeSocket
	}
	if c.Limits.MaxSteps == 0 {
		c.Limits.MaxSteps = DefaultMaxSteps
	}
	if c.Limits.JobTimeout == 0 {
		c.Limits.JobTimeout = Duration(DefaultJobTimeout)
	}
	if c.Limits.ConfirmTTL == 0 {
		c.Limits.ConfirmTTL = Duration(DefaultConfirmTTL)
	}
	if c.Limits.LeaseTTL == 0 {
		c.Limits.LeaseTTL = Duration(DefaultLeaseTTL)
	}
	if c.Limits.ShutdownGrace == 0 {
		c.Limits.ShutdownGrace = Duration(DefaultShutdownGrace)
	}
	if c.Store.Retention == 0 {
		c.Store.Retention = Duration(DefaultRetention)
	}
	if c.Store.Driver == "" {
		c.Store.Driver = StoreSQLite
	}
	if c.Store.Driver == StorePostgres && c.Store.MaxConns == 0 {
		c.Store.MaxConns = DefaultStoreMaxConns
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Auth.DefaultRole == "" {
		c.Auth.DefaultRole = "none"
	}
	if c.Matrix != nil && c.Matrix.StaleAfter == 0 {
		c.Matrix.StaleAfter = Duration(DefaultMatrixStaleAfter)
	}
	if c.Timezone == "" {
		c.Timezone = "UTC"
	}
	if c.Watchdog.Interval == 0 {
		c.Watchdog.Interval = Duration(DefaultWatchdogInterval)
	}
	if c.Watchdog.Remind == 0 {
		c.Watchdog.Remind = Duration(DefaultWatchdogRemind)
	}
	for i := range c.Schedules {
		if c.Schedules[i].Missed == "" {
			c.Schedules[i].Missed = MissedSkip
		}
	}
	if c.SSH.ConnectTimeout == 0 {
		c.SSH.ConnectTimeout = Duration(10 * time.Second)
	}
	if c.SSH.KeepAlive == 0 {
		c.SSH.KeepAlive = Duration(30 * time.Second)
	}
	if c.Bench.Prompts == 0 {
		c.Bench.Prompts = ops.DefaultBench().Prompts
	}
	if c.Bench.Concurrency == 0 {
		c.Bench.Concurrency = ops.DefaultBench().Concurrency
	}
	if c.Bench.InputLen == 0 {
		c.Bench.InputLen = ops.DefaultBench().InputLen
	}
	if c.Bench.OutputLen == 0 {
		c.Bench.OutputLen = ops.DefaultBench().OutputLen
	}
	if c.Sweep.Metric == "" {
		c.Sweep.Metric = SweepMetrics[0]
	}
	if c.Alerts.RegressionPct == 0 {
		c.Alerts.RegressionPct = DefaultRegressionPct
	}
	if c.Alerts.RegressionRuns == 0 {
		c.Alerts.RegressionRuns = DefaultRegressionRuns
	}
	for name, s := range c.Services {
		if s.Engine == "" {
			s.Engine = "sglang"
		}
		if s.Edit == "" {
			s.Edit = "in-place"
		}
		if s.ReadyTimeout == 0 {
			s.ReadyTimeout = Duration(DefaultReadyTimeout)
		}
		if s.ClearMiB == 0 {
			s.ClearMiB = DefaultClearMiB
		}
		c.Services[name] = s
	}
	if c.Store.Driver != StorePostgres {
		c.Store.Path = c.Path(c.Store.Path)
	}
	c.SSH.KeyFile = c.Path(c.SSH.KeyFile)
	c.SSH.KnownHosts = c.Path(c.SSH.KnownHosts)
}

// Path resolves p against the config file's directory.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Roles known to auth, lowest first.
var Roles = []string{"none", "viewer", "operator", "admin"}

func knownRole(r string) bool {
	for _, k := range Roles {
		if k == r {
			return true
		}
	}
	return false
}

// Validate reports every problem in the config at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Sweep.Metric != "" && !slices.Contains(SweepMetrics, c.Sweep.Metric) {
		bad("sweep.metric: %q is not one of %s", c.Sweep.Metric, strings.Join(SweepMetrics, ", "))
	}
	if c.Alerts.RegressionPct < 0 || c.Alerts.RegressionPct >= 100 {
		bad("alerts.regression_pct: %d is not a percentage in 1..99 (a drop of more than it below the median alerts)", c.Alerts.RegressionPct)
	}
	if c.Alerts.RegressionRuns < 0 || c.Alerts.RegressionRuns > 1000 {
		bad("alerts.regression_runs: %d is not in 1..1000 (the comparable runs whose median a result is judged against)", c.Alerts.RegressionRuns)
	}
	c.validateStore(bad)
	if len(c.Services) > 0 {
		if c.SSH.KeyFile == "" {
			bad("ssh.key_file is required when services are configured")
		}
		if c.SSH.KnownHosts == "" {
			bad("ssh.known_hosts is required: host keys are always checked")
		}
	}
	for _, name := range sortedKeys(c.Hosts) {
		h := c.Hosts[name]
		if !nameRE.MatchString(name) {
			bad("hosts.%s: names are lower-case letters, digits, '.', '_' and '-'", name)
		}
		if h.Addr == "" {
			bad("hosts.%s.addr is required (host:port)", name)
		}
		if h.User == "" {
			bad("hosts.%s.user is required", name)
		}
		if h.Jump != "" {
			if _, ok := c.Hosts[h.Jump]; !ok {
				bad("hosts.%s.jump names unknown host %q", name, h.Jump)
			} else if h.Jump == name {
				bad("hosts.%s.jump names itself", name)
			}
		}
	}
	for _, name := range sortedKeys(c.Services) {
		s := c.Services[name]
		if !nameRE.MatchString(name) {
			bad("services.%s: names are lower-case letters, digits, '.', '_' and '-'", name)
		}
		if h, ok := c.Hosts[s.Host]; !ok {
			bad("services.%s.host names unknown host %q", name, s.Host)
		} else if len(h.Prefix) > 0 {
			// Unit files are read and written over sftp, which a prefix does not reach.
			bad("services.%s.host %s has a command prefix: the unit's files must be reachable over sftp, so give the service's host its own SSH (a prefix suits hosts used for commands only)", name, s.Host)
		}
		if !strings.HasSuffix(s.Unit, ".service") || strings.ContainsAny(s.Unit, "/ \t\n") {
			bad("services.%s.unit must be a unit name like sglang-qwen.service, got %q", name, s.Unit)
		}
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("services.%s.url must be the engine's http(s) base URL, got %q", name, s.URL)
		}
		if s.Engine != "sglang" && s.Engine != "vllm" {
			bad("services.%s.engine must be sglang or vllm, got %q", name, s.Engine)
		}
		if s.Edit != "in-place" && s.Edit != "drop-in" {
			bad("services.%s.edit must be in-place or drop-in, got %q", name, s.Edit)
		}
		if p := s.Proxmox; p != nil {
			if _, ok := c.Hosts[p.Node]; !ok {
				bad("services.%s.proxmox.node names unknown host %q", name, p.Node)
			}
			if p.VMID < 100 || p.VMID > 999999999 {
				bad("services.%s.proxmox.vmid must be a Proxmox guest id (>= 100), got %d", name, p.VMID)
			}
		}
		for _, g := range s.GPUs {
			if g < 0 || g > 63 {
				bad("services.%s.gpus: index %d out of range 0..63", name, g)
			}
		}
		if s.DefaultSteps < 0 || s.DefaultSteps > c.Limits.MaxSteps {
			bad("services.%s.default_steps must be within 1..%d", name, c.Limits.MaxSteps)
		}
		if p := s.AdaptiveConfig; p != "" && !plainAbsPath(p) {
			bad("services.%s.adaptive_config must be an absolute path of letters, digits and /._-+@ only (it goes into the unit's command line unquoted), got %q", name, p)
		}
	}
	if d := c.DefaultService; d != "" {
		if _, ok := c.Services[d]; !ok {
			bad("default_service names unknown service %q (the services are %s)", d, strings.Join(sortedKeys(c.Services), ", "))
		}
	}
	if !knownRole(c.Auth.DefaultRole) {
		bad("auth.default_role must be one of %s, got %q", strings.Join(Roles, ", "), c.Auth.DefaultRole)
	}
	for _, id := range sortedKeys(c.Auth.Users) {
		role := c.Auth.Users[id]
		if !knownRole(role) {
			bad("auth.users[%q]: unknown role %q (one of %s)", id, role, strings.Join(Roles, ", "))
		}
		if p, _, ok := strings.Cut(id, ":"); !ok || (p != "slack" && p != "slack-group" && p != "matrix" && p != "console") {
			bad("auth.users[%q]: keys are platform:id with platform slack, slack-group (a user group id), matrix or console", id)
		}
	}
	if c.Limits.MaxSteps < 1 || c.Limits.MaxSteps > 64 {
		bad("limits.max_steps must be within 1..64, got %d", c.Limits.MaxSteps)
	}
	if c.Limits.LeaseTTL < Duration(time.Second) {
		bad("limits.lease_ttl must be at least 1s, got %s", c.Limits.LeaseTTL.D())
	}
	if c.Store.Retention < Duration(time.Hour) {
		bad("store.retention must be at least 1h (e.g. 90d), got %s", c.Store.Retention.D())
	}
	if l := c.HTTP.Listen; l != "" {
		if err := checkListen(l); err != nil {
			bad("http.listen must be HOST:PORT, like 127.0.0.1:9090: %v", err)
		}
	}
	if f := c.Log.Format; f != "text" && f != "json" {
		bad("log.format must be text or json, got %q", f)
	}
	if _, err := LogLevel(c.Log.Level); err != nil {
		bad("log.level: %v", err)
	}
	if s := c.Slack; s != nil && s.Enabled {
		c.validateSlack(bad)
	}
	if m := c.Matrix; m != nil && m.Enabled {
		if m.Homeserver == "" {
			bad("matrix.homeserver is required when matrix is enabled")
		}
		if m.UserID == "" {
			bad("matrix.user_id is required when matrix is enabled")
		}
		if m.AccessToken == "" && m.Password == "" {
			bad("matrix.access_token or matrix.password is required when matrix is enabled")
		}
		if len(m.Rooms) == 0 {
			bad("matrix.rooms must list the rooms the bot obeys")
		}
		if m.Homeserver != "" {
			if u, err := url.Parse(m.Homeserver); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("matrix.homeserver: want the homeserver's base URL, e.g. https://matrix.example.org")
			}
		}
		if m.UserID != "" && !matrixID.MatchString(m.UserID) {
			bad("matrix.user_id: want a Matrix user id, e.g. @opsbot:example.org")
		}
		for i, r := range m.Rooms {
			if !matrixRoomID.MatchString(r) {
				bad("matrix.rooms[%d]: want a room id, e.g. !abc:example.org (Element: Room settings > Advanced), not an alias or a name", i)
			}
		}
		validatePowerLevels(m.PowerLevels, bad)
		if m.Encryption && !MatrixEncryptionBuilt {
			bad("matrix.encryption: end-to-end encryption is not in this build of opsbot (build it with -tags goolm, as the release builds are), " +
				"or use a room without encryption and set encryption: false")
		}
	}
	c.validateSchedules(bad)
	if len(errs) > 0 {
		return &Error{Problems: errs}
	}
	return nil
}

// MaxPowerLevel is the largest power level Matrix allows (canonical JSON
// integers are within ±(2^53-1)).
const MaxPowerLevel = 1<<53 - 1

// validatePowerLevels checks matrix.power_levels: roles by name (not
// "none"), levels within Matrix's range, and a higher role never at a lower
// level than a lower role.
func validatePowerLevels(levels map[string]int, bad func(string, ...any)) {
	type grant struct {
		role  string
		level int
	}
	var order []grant // the roles set, lowest role first
	for _, role := range Roles {
		if l, ok := levels[role]; ok && role != "none" {
			order = append(order, grant{role, l})
		}
	}
	for _, role := range sortedKeys(levels) {
		l := levels[role]
		switch {
		case role == "none":
			bad("matrix.power_levels.none: none is not a role to grant; list viewer, operator or admin")
		case !knownRole(role):
			bad("matrix.power_levels.%s: unknown role (one of viewer, operator, admin), e.g. power_levels: {operator: 50, admin: 100}", role)
		case l < -MaxPowerLevel || l > MaxPowerLevel:
			bad("matrix.power_levels.%s: %d is not a Matrix power level (within ±%d)", role, l, MaxPowerLevel)
		}
	}
	for i := 1; i < len(order); i++ {
		if hi, lo := order[i], order[i-1]; hi.level < lo.level {
			bad("matrix.power_levels: %s needs a level at least as high as %s's, got %s: %d below %s: %d",
				hi.role, lo.role, hi.role, hi.level, lo.role, lo.level)
		}
	}
}

// checkListen checks a listen address is HOST:PORT with a numeric port.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number within 0..65535", port)
	}
	return nil
}

// LogLevel returns the slog level named by log.level.
func LogLevel(name string) (slog.Level, error) {
	switch name {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("must be debug, info, warn or error, got %q", name)
}

// validateSchedules checks timezone, schedules and watchdog.
func (c *Config) validateSchedules(bad func(string, ...any)) {
	if _, err := time.LoadLocation(c.Timezone); err != nil || c.Timezone == "Local" {
		bad("timezone: %q is not an IANA time zone (e.g. UTC, Europe/Berlin)", c.Timezone)
	}
	if c.Watchdog.Interval.D() < time.Second {
		bad("watchdog.interval: %s is too short (at least 1s)", c.Watchdog.Interval.D())
	}
	if c.Watchdog.Remind.D() < time.Minute {
		bad("watchdog.remind: %s is too short (at least 1m): a reminder is a message to everyone in the room", c.Watchdog.Remind.D())
	}
	if c.Watchdog.To != "" {
		if _, err := commands.ParseTargets(c.Watchdog.To); err != nil {
			bad("watchdog.to: %v", err)
		}
	}
	opts := c.CommandOptions()
	for i, s := range c.Schedules {
		key := fmt.Sprintf("schedules[%d]", i)
		if _, err := commands.ValidateCron(s.Cron); err != nil {
			bad("%s.cron: %v", key, err)
		}
		if strings.TrimSpace(s.Command) == "" {
			bad("%s.command is required (e.g. sweep qwen steps 1..5)", key)
		} else if opts.Validate() == nil {
			if cmd, err := commands.Parse(s.Command, opts); err != nil {
				bad("%s.command: %v", key, err)
			} else if !cmd.Spec().Schedulable || commands.IsDryRun(cmd) {
				bad("%s.command: %s cannot run on a schedule (%s can)", key, cmd.Spec().Path, commands.SchedulableList())
			}
		}
		if p, id, ok := strings.Cut(s.As, ":"); !ok || p == "" || id == "" || strings.ContainsAny(s.As, " \t\n") {
			bad("%s.as: the user the runs are authorised as, as in auth.users (e.g. slack:U024BE7LH)", key)
		}
		if s.To == "" {
			bad("%s.to is required: the rooms its runs report to (e.g. slack:C0OPS)", key)
		} else if _, err := commands.ParseTargets(s.To); err != nil {
			bad("%s.to: %v", key, err)
		}
		if s.Missed != MissedRun && s.Missed != MissedSkip {
			bad("%s.missed: %q: want run or skip", key, s.Missed)
		}
	}
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
		m.AccessToken, m.Password = redact(m.AccessToken), redact(m.Password)
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

// ServiceNames returns the configured service names, sorted.
func (c *Config) ServiceNames() []string { return sortedKeys(c.Services) }

// HostNames returns the configured host names, sorted.
func (c *Config) HostNames() []string { return sortedKeys(c.Hosts) }

// ErrNoService is returned by Service for an unknown name.
var ErrNoService = errors.New("no such service")

// Service returns the named service.
func (c *Config) Service(name string) (Service, error) {
	s, ok := c.Services[name]
	if !ok {
		return Service{}, fmt.Errorf("%w: %q", ErrNoService, name)
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// validateSlack checks the enabled slack section, naming each problem by its
// key and never quoting a secret.
func (c *Config) validateSlack(bad func(string, ...any)) {
	s := c.Slack
	switch s.Mode {
	case SlackModeSocket:
		if s.AppToken == "" {
			bad("slack.app_token is required in socket mode (an app-level token, xapp-..., with connections:write)")
		} else if resolved(s.AppToken) && !strings.HasPrefix(s.AppToken.Value(), "xapp-") {
			bad("slack.app_token must be an app-level token (xapp-...)")
		}
	case SlackModeHTTP:
		if s.SigningSecret == "" {
			bad("slack.signing_secret is required in http mode (the app's Basic Information page shows it)")
		}
	default:
		bad("slack.mode must be %s or %s", SlackModeHTTP, SlackModeSocket)
	}
	if s.BotToken == "" {
		bad("slack.bot_token is required when slack is enabled")
	} else if resolved(s.BotToken) && !strings.HasPrefix(s.BotToken.Value(), "xoxb-") {
		bad("slack.bot_token must be a bot token (xoxb-...)")
	}
	if s.APIURL != "" {
		u, err := url.Parse(s.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.HasSuffix(u.Path, "/") {
			bad("slack.api_url must be an http(s) URL ending in /, such as https://slack.com/api/")
		}
	}
	if s.Channel != "" && !slackIDRE.MatchString(s.Channel) {
		bad("slack.channel must be a channel id such as C0123ABCD (the channel's details show it), not a name")
	}
	if len(s.Channels) == 0 && !s.AllowDMs {
		bad("slack.channels must list the channel ids commands are taken from (or set slack.allow_dms: true)")
	}
	for i, ch := range s.Channels {
		if !slackIDRE.MatchString(ch) {
			bad("slack.channels[%d] must be a channel id such as C0123ABCD, not a name", i)
		}
	}
}

// resolved reports whether a secret holds its value rather than a reference
// that could not be resolved (that problem is reported on its own).
func resolved(s Secret) bool {
	v := s.Value()
	return !strings.HasPrefix(v, "${") && !strings.HasPrefix(v, "file:")
}

// CommandOptions are what parsing a chat command needs from the config: the
// steps limit, the services with their hosts, the hosts, default_service.
func (c *Config) CommandOptions() commands.Options {
	opts := commands.Options{MaxSteps: c.Limits.MaxSteps, Hosts: c.HostNames(), DefaultService: c.DefaultService}
	for _, name := range c.ServiceNames() {
		opts.Services = append(opts.Services, commands.ServiceRef{Name: name, Host: c.Services[name].Host})
	}
	return opts
}

// The store drivers (store.driver).
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// validateStore checks the store section: the driver, and the one key that
// names the database for it (store.path for sqlite, store.url for postgres),
// refusing the other by name. store.url is a secret: no message shows it.
func (c *Config) validateStore(bad func(format string, a ...any)) {
	st := c.Store
	switch st.Driver {
	case "", StoreSQLite:
		if st.Path == "" {
			bad("store.path is required (the SQLite file, e.g. opsbot.db)")
		}
		if st.URL != "" {
			bad("store.url is for store.driver postgres; with driver sqlite the store is the file store.path (remove store.url, or set store.driver: postgres)")
		}
		if st.MaxConns != 0 {
			bad("store.max_conns is for store.driver postgres; a sqlite store has one writer (remove store.max_conns)")
		}
	case StorePostgres:
		if st.URL == "" {
			bad("store.url is required with store.driver postgres (postgres://USER@HOST:5432/DB?sslmode=verify-full, ${ENV} or file:/path)")
		} else if resolved(st.URL) && !postgresURL(st.URL.Value()) {
			bad("store.url is not a PostgreSQL connection string: expected postgres://USER@HOST:PORT/DB or key=value pairs such as host=HOST dbname=DB (the value is a secret and is not shown)")
		}
		if st.Path != "" {
			bad("store.path is for store.driver sqlite; with driver postgres the store is store.url (remove store.path)")
		}
		if st.MaxConns < 1 || st.MaxConns > 1000 {
			bad("store.max_conns: %d is not in 1..1000 (the most connections opsbot opens to PostgreSQL; default %d)", st.MaxConns, DefaultStoreMaxConns)
		}
	default:
		bad("store.driver: %q is not one of sqlite, postgres", st.Driver)
	}
}

// postgresURL reports whether s has the shape of a PostgreSQL connection
// string: a postgres:// or postgresql:// URL with a host or a socket
// directory, or libpq's key=value pairs.
func postgresURL(s string) bool {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		return err == nil && (u.Host != "" || u.Query().Get("host") != "")
	}
	return strings.Contains(s, "=") && !strings.Contains(s, "://")
}

// AdaptiveConfigDefault is where a service's adaptive speculative config file
// goes when services.NAME.adaptive_config is not set.
func AdaptiveConfigDefault(service string) string {
	return "/etc/sglang/" + service + "-adaptive.json"
}

// AdaptiveConfigPath is the service's adaptive config path: its
// adaptive_config, else AdaptiveConfigDefault(name).
func (s Service) AdaptiveConfigPath(name string) string {
	if s.AdaptiveConfig != "" {
		return s.AdaptiveConfig
	}
	return AdaptiveConfigDefault(name)
}

// plainAbsPath: an absolute path that needs no quoting in a unit or a shell.
func plainAbsPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@", r)) {
			return false
		}
	}
	return true
}
