package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/ops/unit"
)

// HostConfig is one SSH-reachable host.
type HostConfig struct {
	Addr string // host:port
	User string
	Jump string // name of another host to reach this one through
	// Prefix is put before every command's argv (e.g. pct exec 129 --).
	Prefix []string
}

// ServiceConfig is one inference server under systemd.
type ServiceConfig struct {
	Host string // where systemd and the engine run
	Unit string // e.g. sglang-qwen.service
	URL  string // the engine's base URL
	// ViaSSH reaches URL through the SSH connection to Host (a direct-tcpip
	// channel; the host's sshd must allow TCP forwarding) instead of
	// directly: for an engine bound to its host's loopback.
	ViaSSH bool
	Engine string // sglang or vllm ("": unit.DefaultEngine)
	GPUs   []int  // the GPUs it uses; empty = all
	// ProxmoxNode and VMID say the host is an LXC container: GPU-holding
	// processes are killed from the node with host PIDs.
	ProxmoxNode string
	VMID        int
	// DropIn deploys edits as UNIT.d/opsbot.conf instead of editing the unit.
	DropIn bool
	// ReadyTimeout bounds the wait for the engine to serve after a start
	// (0: engine.DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// ClearMiB is the per-GPU memory below which a GPU counts as clear
	// (0: gpu.DefaultClearMiB).
	ClearMiB     int
	DefaultSteps int
	// AdaptiveConfig is the path on Host of SGLang's adaptive speculative config
	// file a per-load tune proposes (config.Service.AdaptiveConfigPath).
	AdaptiveConfig string
	// Replica is set when this service is one replica of a replicated
	// service (config services.NAME.replicas); the service is then named
	// GROUP@REPLICA (ReplicaName).
	Replica *ReplicaOf
}

// ReplicaOf places one replica in its replicated service.
type ReplicaOf struct {
	Group string // the service as configured, e.g. qwen
	Name  string // the replica's name, e.g. gpu3 (its host's name unless the config names it)
	// Index is its place in the group's replicas as configured (0: the
	// first): a rollout's canary is the first, its waves follow the order.
	Index int
	// Router balances the group's requests across its replicas; nil: none,
	// and a replica takes traffic while it restarts.
	Router *RouterConfig
}

// RouterConfig is the router in front of a replicated service's replicas
// (config services.NAME.router).
type RouterConfig struct {
	URL  string // the router's base URL (its worker API and its requests)
	Kind string // the API it speaks: router.KindSGLang
	// Worker is the URL the router knows this replica by (config
	// replicas[].worker_url; default: the replica's url).
	Worker string
}

// RolloutConfig is how a change to a replicated service rolls out (config
// rollout): the canary's gate against an unchanged sibling, and how many
// replicas may be out of the router at once.
type RolloutConfig struct {
	// MinTokSRatio is the lowest canary/sibling output tok/s that passes.
	MinTokSRatio float64
	// MaxTTFTP95Ratio is the highest canary/sibling TTFT p95 that passes.
	MaxTTFTP95Ratio float64
	// MaxUnavailable is the most replicas of one service out of its router
	// at once, across every job.
	MaxUnavailable int
	// DrainTimeout bounds the wait, after a replica left its router, for
	// the requests it holds to finish before its engine stops; past it the
	// stop goes on and says how many it cuts (0: DefaultRollout's).
	DrainTimeout time.Duration
	// UnavailableWait bounds the wait for another replica to come back
	// when taking this one out would put more than MaxUnavailable out;
	// past it the job refuses, naming who is out (0: DefaultRollout's).
	UnavailableWait time.Duration
}

// DefaultRollout is the rollout's gate and limits when the config sets
// none: its one home (the config package takes them from here).
var DefaultRollout = RolloutConfig{MinTokSRatio: DefaultMinTokSRatio, MaxTTFTP95Ratio: DefaultMaxTTFTP95Ratio,
	MaxUnavailable: DefaultMaxUnavailable, DrainTimeout: DefaultDrainTimeout, UnavailableWait: DefaultUnavailableWait}

// The rollout's defaults, one by one (DefaultRollout).
const (
	// DefaultMinTokSRatio: a canary within 3% of its sibling's output tok/s passes.
	DefaultMinTokSRatio = 0.97
	// DefaultMaxTTFTP95Ratio: a canary whose TTFT p95 is at most 20% above its sibling's passes.
	DefaultMaxTTFTP95Ratio = 1.2
	// DefaultMaxUnavailable: one replica out of its router at a time.
	DefaultMaxUnavailable = 1
	// DefaultDrainTimeout: how long a drained replica's in-flight requests
	// may take before its engine stops anyway.
	DefaultDrainTimeout = 2 * time.Minute
	// DefaultUnavailableWait: how long a drain waits for another replica
	// to come back before it refuses.
	DefaultUnavailableWait = 15 * time.Minute
)

// ReplicaName is the service name of a group's replica: GROUP@REPLICA.
func ReplicaName(group, replica string) string { return group + "@" + replica }

// BenchDefaults are the benchmark parameters used when a command gives none.
type BenchDefaults struct {
	Prompts, Concurrency, InputLen, OutputLen int
}

// Config is everything the runbook needs to reach and act on hosts.
type Config struct {
	KeyFile    string
	KnownHosts string
	// ConnectTimeout and KeepAlive tune the SSH pool (0: the pool's
	// remote.DefaultConnectTimeout and remote.DefaultKeepAlive).
	ConnectTimeout time.Duration
	KeepAlive      time.Duration
	Hosts          map[string]HostConfig
	Services       map[string]ServiceConfig
	// Rollout is how changes to replicated services roll out.
	Rollout  RolloutConfig
	Bench    BenchDefaults
	MaxSteps int
	// SweepMetric is the figure a sweep's best point is chosen by:
	// "output_tok_s" (default), "per_stream_tok_s" or "accept_len".
	SweepMetric string
	// FleetHostTimeout bounds how long `fleet` waits for one host's answer
	// (default DefaultFleetHostTimeout).
	FleetHostTimeout time.Duration
	// Poll is the interval of every wait loop (default 50 ms).
	Poll time.Duration
	// ProgressEvery is the longest a long wait (model load, warm-up) goes
	// without a progress line in the job's thread (default 10 s).
	ProgressEvery time.Duration
	// StopTimeout bounds waiting for a service to stop (default 2 minutes).
	StopTimeout time.Duration
	// ReapGrace is how long SIGTERM gets before SIGKILL (default
	// gpu.DefaultGrace, 5 s).
	ReapGrace time.Duration
	// SettleTime is how long a started service must stay up without a restart
	// before it counts as started (default 1 s).
	SettleTime time.Duration
	// ClearTimeout bounds waiting for GPU memory to be released (default 2 minutes).
	ClearTimeout time.Duration
	// StrandedAfter is how long memory that no process holds may stay on a
	// GPU without falling before it counts as stranded: `gpu recover` stops
	// waiting and offers a GPU reset (default DefaultStrandedAfter).
	StrandedAfter time.Duration
	// NodeLocks holds a physical node for a pipeline's mutating window
	// (nil: within this process only). Set it to a store-backed lease so
	// that it holds across opsbot processes.
	NodeLocks Locker
	// Changes is the job history `mtp undo` reads (nil: mtp undo fails
	// saying it has none).
	Changes ChangeLog
	// RebuiltAfter, when above 0, says the hosts were built anew after job
	// RebuiltAfter (the lab of `opsbot run --config FILE --lab`, new at every
	// run, beside a store that lasts): `mtp undo` of a change an earlier job
	// made says the hosts were rebuilt, not that someone changed the unit.
	RebuiltAfter int64
	Logger       *slog.Logger
}

// ErrUnknownService is returned for a service the config does not name.
var ErrUnknownService = errors.New("unknown service")

func (c *Config) service(name string) (ServiceConfig, error) {
	s, ok := c.Services[name]
	if !ok {
		names := make([]string, 0, len(c.Services))
		for n := range c.Services {
			names = append(names, n)
		}
		sort.Strings(names)
		return ServiceConfig{}, fmt.Errorf("%w %q (configured: %v)", ErrUnknownService, name, names)
	}
	return s, nil
}

func (c *Config) withDefaults() Config {
	cc := *c
	if cc.Poll <= 0 {
		cc.Poll = 50 * time.Millisecond
	}
	if cc.FleetHostTimeout <= 0 {
		cc.FleetHostTimeout = DefaultFleetHostTimeout
	}
	if cc.ProgressEvery <= 0 {
		cc.ProgressEvery = 10 * time.Second
	}
	if cc.StopTimeout <= 0 {
		cc.StopTimeout = 2 * time.Minute
	}
	if cc.ReapGrace <= 0 {
		cc.ReapGrace = gpu.DefaultGrace
	}
	if cc.SettleTime <= 0 {
		cc.SettleTime = time.Second
	}
	if cc.ClearTimeout <= 0 {
		cc.ClearTimeout = 2 * time.Minute
	}
	if cc.StrandedAfter <= 0 {
		cc.StrandedAfter = DefaultStrandedAfter
	}
	// Benchmark defaults for a Config built without the config package (which
	// applies the same ones): DefaultBench().
	d := DefaultBench()
	for _, f := range []struct {
		v   *int
		def int
	}{{&cc.Bench.Prompts, d.Prompts}, {&cc.Bench.Concurrency, d.Concurrency}, {&cc.Bench.InputLen, d.InputLen}, {&cc.Bench.OutputLen, d.OutputLen}} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	d2 := DefaultRollout
	for _, f := range []struct {
		v   *float64
		def float64
	}{{&cc.Rollout.MinTokSRatio, d2.MinTokSRatio}, {&cc.Rollout.MaxTTFTP95Ratio, d2.MaxTTFTP95Ratio}} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	if cc.Rollout.MaxUnavailable <= 0 {
		cc.Rollout.MaxUnavailable = d2.MaxUnavailable
	}
	if cc.Rollout.DrainTimeout <= 0 {
		cc.Rollout.DrainTimeout = d2.DrainTimeout
	}
	if cc.Rollout.UnavailableWait <= 0 {
		cc.Rollout.UnavailableWait = d2.UnavailableWait
	}
	if cc.MaxSteps <= 0 {
		cc.MaxSteps = unit.DefaultMaxSteps
	}
	if cc.Logger == nil {
		cc.Logger = slog.Default()
	}
	if cc.NodeLocks == nil {
		cc.NodeLocks = NewProcessLocker()
	}
	services := make(map[string]ServiceConfig, len(c.Services))
	for name, s := range c.Services {
		if s.ReadyTimeout <= 0 {
			s.ReadyTimeout = engine.DefaultReadyTimeout
		}
		if s.ClearMiB <= 0 {
			s.ClearMiB = gpu.DefaultClearMiB
		}
		if s.Engine == "" {
			s.Engine = unit.DefaultEngine
		}
		services[name] = s
	}
	cc.Services = services
	return cc
}

// step reports the start and the end of one named step of a pipeline.
type step struct {
	rep  Reporter
	name string
	t0   time.Time
}

func begin(rep Reporter, name, format string, a ...any) *step {
	s := &step{rep: rep, name: name, t0: time.Now()}
	rep.Report(Event{At: s.t0, Step: name, Status: StepStarted, Message: fmt.Sprintf(format, a...)})
	return s
}

func (s *step) progress(format string, a ...any) {
	s.rep.Report(Event{At: time.Now(), Step: s.name, Status: StepProgress, Message: fmt.Sprintf(format, a...)})
}

func (s *step) warn(format string, a ...any) {
	s.rep.Report(Event{At: time.Now(), Step: s.name, Status: StepWarning, Message: fmt.Sprintf(format, a...)})
}

func (s *step) done(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if msg != "" {
		msg += " "
	}
	msg += fmt.Sprintf("(%s)", time.Since(s.t0).Round(time.Millisecond))
	s.rep.Report(Event{At: time.Now(), Step: s.name, Status: StepDone, Message: msg})
}

// fail reports the step failed and returns err wrapped with the step's name.
// A step ended by the job's end (cancel, timeout, shutdown) says "stopped"
// rather than Go's "context canceled".
func (s *step) fail(err error) error {
	msg := err.Error()
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			if m := strings.TrimSuffix(strings.TrimSuffix(msg, c.Error()), ": "); m != msg {
				msg = m + " (stopped)"
				if m == "" {
					msg = "stopped"
				}
			}
		}
	}
	s.rep.Report(Event{At: time.Now(), Step: s.name, Status: StepFailed, Message: msg})
	return fmt.Errorf("%s: %w", s.name, err)
}

func (s *step) skip(format string, a ...any) {
	s.rep.Report(Event{At: time.Now(), Step: s.name, Status: StepSkipped, Message: fmt.Sprintf(format, a...)})
}

// sleepCtx waits d or until ctx ends. Used only between polls of a condition.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
