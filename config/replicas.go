package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/router"
)

// Replica is one replica of a replicated service (services.NAME.replicas[]):
// the service's engine on one host. What it leaves out it shares with its
// service (unit, engine, edit, ready_timeout, ...).
type Replica struct {
	// Name is the replica's name within its service; "" = its host. The
	// replica is the service NAME@REPLICA (ops.ReplicaName).
	Name string `yaml:"name,omitempty"`
	Host string `yaml:"host"`
	GPUs []int  `yaml:"gpus,omitempty"`
	URL  string `yaml:"url"`
	// Unit is the replica's systemd unit; "" = its service's.
	Unit string `yaml:"unit,omitempty"`
	// WorkerURL is the URL its service's router knows the replica by; "" =
	// URL.
	WorkerURL string `yaml:"worker_url,omitempty"`
	// ViaSSH reaches URL through the SSH connection to Host; unset = its
	// service's via_ssh.
	ViaSSH  *bool    `yaml:"via_ssh,omitempty"`
	Proxmox *Proxmox `yaml:"proxmox,omitempty"`
}

// ReplicaName is the replica's name within its service: Name, else Host.
func (r Replica) ReplicaName() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Host
}

// Router is the router in front of a replicated service's replicas
// (services.NAME.router).
type Router struct {
	URL string `yaml:"url"`
	// Kind is the API it speaks (default DefaultRouterKind, the only one).
	Kind string `yaml:"kind,omitempty"`
}

// RouterKinds are the values services.NAME.router.kind takes.
var RouterKinds = []string{router.KindSGLang}

// Rollout is how a change to a replicated service rolls out (rollout).
type Rollout struct {
	Gate RolloutGate `yaml:"gate,omitempty"`
	// MaxUnavailable is the most replicas of one service out of its router
	// (or, without a router, being changed) at once (default
	// DefaultMaxUnavailable). It must stay below every replicated service's
	// number of replicas: at least one replica keeps serving.
	MaxUnavailable int `yaml:"max_unavailable,omitempty"`
	// DrainTimeout bounds the wait for a drained replica's in-flight
	// requests before its engine stops anyway (default DefaultDrainTimeout).
	DrainTimeout Duration `yaml:"drain_timeout,omitempty"`
	// UnavailableWait bounds a drain's wait for another replica to come back
	// into the router before it refuses (default DefaultUnavailableWait).
	UnavailableWait Duration `yaml:"unavailable_wait,omitempty"`
}

// RolloutGate is what a canary must measure against an unchanged sibling,
// benchmarked in the same window, for a rollout to go on.
type RolloutGate struct {
	// MinTokSRatio is the lowest canary/sibling output tok/s that passes
	// (default DefaultMinTokSRatio).
	MinTokSRatio float64 `yaml:"min_tok_s_ratio,omitempty"`
	// MaxTTFTP95Ratio is the highest canary/sibling TTFT p95 that passes
	// (default DefaultMaxTTFTP95Ratio).
	MaxTTFTP95Ratio float64 `yaml:"max_ttft_p95_ratio,omitempty"`
}

// The ranges of the rollout gate's ratios: a gate outside them either
// passes a canary that lost most of its speed or fails one that changed
// nothing (the two replicas' figures differ by noise).
const (
	MinTokSRatioLow, MinTokSRatioHigh       = 0.5, 1.0
	MaxTTFTP95RatioLow, MaxTTFTP95RatioHigh = 1.0, 5.0
)

// Instance is one service opsbot acts on: a service as configured, or one
// replica of a replicated service, named GROUP@REPLICA, with what it shares
// with its group filled in.
type Instance struct {
	Name    string  // "qwen", or "qwen@gpu3" for a replica
	Service Service // its settings: a replica's host, url, gpus, unit, via_ssh and proxmox; its group's others
	// Group and Replica are set for a replica: its service as configured
	// and its name there; Router is the group's router (nil: none) and
	// WorkerURL the URL the router knows the replica by.
	Group, Replica string
	Router         *Router
	WorkerURL      string
	// ReplicaIndex is a replica's place in its group's replicas as
	// configured (0: the first, a rollout's canary).
	ReplicaIndex int
}

// Instances are the services opsbot acts on, sorted by name: every service
// configured without replicas, and every replica of the others as a
// service of its own, GROUP@REPLICA. It is the one place replicas are
// expanded: commands, auth, the watchdog and the runbook all take their
// services from it. A replicated service itself (the group) is not one.
func (c *Config) Instances() []Instance {
	var out []Instance
	for _, name := range sortedKeys(c.Services) {
		s := c.Services[name]
		if len(s.Replicas) == 0 {
			out = append(out, Instance{Name: name, Service: s})
			continue
		}
		for i, r := range s.Replicas {
			out = append(out, replicaInstance(name, s, r, i))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// replicaInstance is replica r, the i-th as configured, of the service
// group s named group.
func replicaInstance(group string, s Service, r Replica, i int) Instance {
	in := Instance{Name: ops.ReplicaName(group, r.ReplicaName()), Group: group, Replica: r.ReplicaName(), Router: s.Router,
		WorkerURL: r.WorkerURL, ReplicaIndex: i}
	is := s
	is.Replicas, is.Router = nil, nil
	is.Host, is.URL, is.GPUs, is.Proxmox = r.Host, r.URL, r.GPUs, r.Proxmox
	if r.Unit != "" {
		is.Unit = r.Unit
	}
	if r.ViaSSH != nil {
		is.ViaSSH = *r.ViaSSH
	}
	if s.AdaptiveConfig == "" {
		// Each replica's own default, so that two on one host never share it.
		is.AdaptiveConfig = AdaptiveConfigDefault(in.Name)
	}
	if in.WorkerURL == "" {
		in.WorkerURL = r.URL
	}
	in.Service = is
	return in
}

// Instance returns the instance named name (a service, or GROUP@REPLICA).
func (c *Config) Instance(name string) (Instance, bool) {
	for _, in := range c.Instances() {
		if in.Name == name {
			return in, true
		}
	}
	return Instance{}, false
}

// ReplicasOf returns the instance names of group's replicas, sorted; nil
// when group is not a replicated service.
func (c *Config) ReplicasOf(group string) []string {
	s, ok := c.Services[group]
	if !ok || len(s.Replicas) == 0 {
		return nil
	}
	out := make([]string, 0, len(s.Replicas))
	for _, r := range s.Replicas {
		out = append(out, ops.ReplicaName(group, r.ReplicaName()))
	}
	sort.Strings(out)
	return out
}

// Node is the machine that owns the instance's GPUs: its Proxmox node, else
// its host.
func (in Instance) Node() string {
	if in.Service.Proxmox != nil {
		return in.Service.Proxmox.Node
	}
	return in.Service.Host
}

// OpsService is the runbook's config of the instance.
func (in Instance) OpsService() ops.ServiceConfig {
	s := in.Service
	sc := ops.ServiceConfig{Host: s.Host, Unit: s.Unit, URL: s.URL, Engine: s.Engine, GPUs: s.GPUs,
		DropIn: s.Edit == "drop-in", ReadyTimeout: s.ReadyTimeout.D(), ClearMiB: s.ClearMiB, DefaultSteps: s.DefaultSteps, ViaSSH: s.ViaSSH,
		AdaptiveConfig: s.AdaptiveConfigPath(in.Name)}
	if s.Proxmox != nil {
		sc.ProxmoxNode, sc.VMID = s.Proxmox.Node, s.Proxmox.VMID
	}
	if in.Group != "" {
		sc.Replica = &ops.ReplicaOf{Group: in.Group, Name: in.Replica, Index: in.ReplicaIndex}
		if in.Router != nil {
			sc.Replica.Router = &ops.RouterConfig{URL: in.Router.URL, Kind: in.Router.Kind, Worker: in.WorkerURL}
		}
	}
	return sc
}

// OpsServices are the runbook's services: every instance by name.
func (c *Config) OpsServices() map[string]ops.ServiceConfig {
	out := map[string]ops.ServiceConfig{}
	for _, in := range c.Instances() {
		out[in.Name] = in.OpsService()
	}
	return out
}

// OpsRollout is the runbook's rollout config.
func (c *Config) OpsRollout() ops.RolloutConfig {
	return ops.RolloutConfig{MinTokSRatio: c.Rollout.Gate.MinTokSRatio, MaxTTFTP95Ratio: c.Rollout.Gate.MaxTTFTP95Ratio,
		MaxUnavailable: c.Rollout.MaxUnavailable, DrainTimeout: time.Duration(c.Rollout.DrainTimeout),
		UnavailableWait: time.Duration(c.Rollout.UnavailableWait)}
}

// validateGroup checks the replicated service name: it has no host, url,
// gpus or proxmox of its own; each replica's name, host, url, unit, GPUs
// and worker_url; its router; and more replicas than
// rollout.max_unavailable.
func (c *Config) validateGroup(name string, s Service, ins []Instance, bad func(string, ...any)) {
	key := "services." + name
	for _, own := range []struct {
		k   string
		set bool
	}{{"host", s.Host != ""}, {"url", s.URL != ""}, {"gpus", len(s.GPUs) > 0}, {"proxmox", s.Proxmox != nil}} {
		if own.set {
			bad("%s.%s: a service with replicas has no %s of its own: set it on each replica (%s.replicas[].%s)", key, own.k, own.k, key, own.k)
		}
	}
	seen := map[string]int{}
	for i, r := range s.Replicas {
		rk := fmt.Sprintf("%s.replicas[%d]", key, i)
		rn := r.ReplicaName()
		switch {
		case rn == "":
			bad("%s.host is required: the host the replica runs on", rk)
		case !nameRE.MatchString(rn):
			bad("%s: the replica's name %q (its name, else its host) is not a name: lower-case letters, digits, '.', '_' and '-'", rk, rn)
		}
		if j, dup := seen[rn]; dup && rn != "" {
			bad("%s: the name %s is taken by %s.replicas[%d]: replicas of one service on one host need a name each (replicas[].name)", rk, rn, key, j)
		} else {
			seen[rn] = i
		}
		c.validateReplica(rk, replicaInstance(name, s, r, i), r, ins, bad)
	}
	if s.Router != nil {
		if _, err := engine.Addr(s.Router.URL); err != nil {
			bad("%s.router.url %v (the router's base URL), got %q", key, strings.Replace(err.Error(), "engine's", "router's", 1), s.Router.URL)
		}
		if !slices.Contains(RouterKinds, s.Router.Kind) {
			bad("%s.router.kind must be %s (the router's worker API), got %q", key, strings.Join(RouterKinds, " or "), s.Router.Kind)
		}
	}
	if m := c.Rollout.MaxUnavailable; m >= 1 && len(s.Replicas) <= m {
		bad("%s.replicas: %d replica(s), and rollout.max_unavailable is %d: a change takes at most max_unavailable replicas out at once and at least one must keep serving, "+
			"so a replicated service needs more than %d (one replica alone: write host, url and gpus on the service itself)", key, len(s.Replicas), m, m)
	}
}

// validateReplica checks one replica (in, as its instance; r, as written
// at rk) and, against the others of ins, its unit and GPUs.
func (c *Config) validateReplica(rk string, in Instance, r Replica, ins []Instance, bad func(string, ...any)) {
	is := in.Service
	if r.Host != "" {
		if h, ok := c.Hosts[r.Host]; !ok {
			bad("%s.host names unknown host %q%s", rk, r.Host, didYouMeanName(r.Host, c.HostNames()))
		} else if len(h.Prefix) > 0 {
			bad("%s.host %s has a command prefix: the unit's files must be reachable over sftp, so give the replica's host its own SSH", rk, r.Host)
		}
	}
	if _, err := engine.Addr(r.URL); err != nil {
		bad("%s.url %v, got %q", rk, err, r.URL)
	}
	if r.WorkerURL != "" {
		if _, err := engine.Addr(r.WorkerURL); err != nil {
			bad("%s.worker_url %v (the URL the router knows the replica by), got %q", rk, err, r.WorkerURL)
		}
	}
	if !strings.HasSuffix(is.Unit, ".service") || strings.ContainsAny(is.Unit, "/ \t\n") {
		bad("%s.unit must be a unit name like sglang-qwen.service (or the service's unit, shared by its replicas), got %q", rk, is.Unit)
	}
	if p := r.Proxmox; p != nil {
		if _, ok := c.Hosts[p.Node]; !ok {
			bad("%s.proxmox.node names unknown host %q", rk, p.Node)
		}
		if p.VMID < 100 || p.VMID > 999999999 {
			bad("%s.proxmox.vmid must be a Proxmox guest id (>= 100), got %d", rk, p.VMID)
		}
	}
	for _, g := range r.GPUs {
		if g < 0 || g > 63 {
			bad("%s.gpus: index %d out of range 0..63", rk, g)
		}
	}
	for _, o := range ins {
		if o.Name == in.Name || (o.Group != "" && o.Name > in.Name) {
			continue // itself, or a replica that reports the pair
		}
		if o.Service.Host == is.Host && o.Service.Unit == is.Unit && is.Unit != "" {
			bad("%s: host %s already runs %s as %s: give this replica a unit of its own (replicas[].unit)", rk, is.Host, is.Unit, o.Name)
		}
		if o.Node() == in.Node() && GPUsOverlap(o.Service.GPUs, is.GPUs) {
			bad("%s: its GPUs (%s) on %s overlap those of %s (%s): each GPU serves one engine", rk, gpuList(is.GPUs), in.Node(), o.Name, gpuList(o.Service.GPUs))
		}
	}
}

// validateRollout checks rollout: the gate's ratios within their ranges
// and max_unavailable at least 1 (validateGroup checks it against each
// replicated service).
func (c *Config) validateRollout(bad func(string, ...any)) {
	g := c.Rollout.Gate
	if r := g.MinTokSRatio; r < MinTokSRatioLow || r > MinTokSRatioHigh {
		bad("rollout.gate.min_tok_s_ratio must be within %g..%g (the lowest canary/sibling output tok/s that passes; %g allows a 3%% drop), got %g",
			MinTokSRatioLow, MinTokSRatioHigh, DefaultMinTokSRatio, r)
	}
	if r := g.MaxTTFTP95Ratio; r < MaxTTFTP95RatioLow || r > MaxTTFTP95RatioHigh {
		bad("rollout.gate.max_ttft_p95_ratio must be within %g..%g (the highest canary/sibling TTFT p95 that passes; %g allows 20%% slower), got %g",
			MaxTTFTP95RatioLow, MaxTTFTP95RatioHigh, DefaultMaxTTFTP95Ratio, r)
	}
	if c.Rollout.MaxUnavailable < 1 {
		bad("rollout.max_unavailable must be at least 1 (the replicas a change takes out at once), got %d", c.Rollout.MaxUnavailable)
	}
	if d := c.Rollout.DrainTimeout; d < Duration(time.Second) || d > Duration(time.Hour) {
		bad("rollout.drain_timeout must be within 1s..1h (how long a drained replica's requests may take before its engine stops anyway), got %s", time.Duration(d))
	}
	if d := c.Rollout.UnavailableWait; d < Duration(time.Second) || d > Duration(24*time.Hour) {
		bad("rollout.unavailable_wait must be within 1s..24h (how long a drain waits for another replica to come back), got %s", time.Duration(d))
	}
}

// GPUsOverlap reports whether GPU lists a and b overlap; an empty list is
// every GPU of its node.
func GPUsOverlap(a, b []int) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, g := range a {
		if slices.Contains(b, g) {
			return true
		}
	}
	return false
}

func gpuList(gs []int) string {
	if len(gs) == 0 {
		return "every GPU"
	}
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = fmt.Sprint(g)
	}
	return strings.Join(parts, ",")
}

// didYouMeanName is " (did you mean X?)" naming the nearest of names, or "".
func didYouMeanName(w string, names []string) string {
	if m := commands.Closest(w, names); m != "" && m != w {
		return fmt.Sprintf(" (did you mean %s?)", m)
	}
	return ""
}
