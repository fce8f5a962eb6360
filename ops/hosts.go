package ops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"sync"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/router"
	"github.com/opsbot/opsbot/ops/systemd"
)

// Runbook runs the pipelines against the configured hosts. It holds one SSH
// connection per host, opened on first use and reused by every job, and one
// engine HTTP client per service. Its methods are safe for concurrent use; the
// job engine makes sure only one job runs per service at a time, and every
// pipeline holds the service's physical node (Config.NodeLocks) for its
// mutating window. A job's pipeline runs on the Runbook bound to the job's
// hold (For).
type Runbook struct {
	cfg   Config
	pool  *remote.Pool
	index *targetIndex // every service's target, unbound; built by New, shared by For's copies
	// bound, in a copy made by For, is its targets bound to hold, each made
	// on first use (a job touches a few services of many); nil in the
	// Runbook New made, whose targets are index's.
	bound *boundTargets
	hold  JobHold // the job it runs for (For); zero: none
	// quietNoRouter: a rollout said once that its group has no router; its
	// replicas' pipelines do not say it again.
	quietNoRouter bool
	// beforeWrite, when set (a rollout's, on its copy of the runbook), is
	// called by deploy after it stopped the service and before it writes
	// the unit: an error leaves the unit unchanged (the service is started
	// again) and fails the pipeline.
	beforeWrite func(ctx context.Context, t *target, p *planned) error
	// prog is the record of the rollout this runbook copy runs (nil: none).
	prog *progress
}

// targetIndex is the services' targets as New built them (unbound: no
// hold), with the lookups the pipelines make by name and by node.
type targetIndex struct {
	byName map[string]*target
	names  []string            // every service, in name order
	byNode map[string][]string // physical node -> its services, in name order
	nodes  []string            // the physical nodes, in the name order of their first service
	// nodeOf maps a host name (a service's host, or a node) to the physical
	// node a host filter means: for a name that is both, the node of the
	// last service in name order that names it.
	nodeOf map[string]string
}

func newTargetIndex(ts map[string]*target) *targetIndex {
	ix := &targetIndex{byName: ts, byNode: map[string][]string{}, nodeOf: map[string]string{}}
	for n := range ts {
		ix.names = append(ix.names, n)
	}
	sort.Strings(ix.names)
	for _, n := range ix.names {
		t := ts[n]
		if ix.byNode[t.nodeName] == nil {
			ix.nodes = append(ix.nodes, t.nodeName)
		}
		ix.byNode[t.nodeName] = append(ix.byNode[t.nodeName], n)
		ix.nodeOf[t.cfg.Host] = t.nodeName
		ix.nodeOf[t.nodeName] = t.nodeName
	}
	return ix
}

// boundTargets are a For copy's targets bound to its hold, by name.
type boundTargets struct {
	mu sync.Mutex
	m  map[string]*target
}

// SSHStats reports each host's SSH connection state and failed dials.
func (r *Runbook) SSHStats() []remote.HostState { return r.pool.Stats() }

// New returns a Runbook for cfg, which the caller has validated (the config
// package does, for opsbot's YAML): New checks only what it needs to build
// the service -> host -> node mapping (the hosts a service names exist) and
// reads the SSH key. It connects to nothing until a job needs a host.
func New(cfg Config) (*Runbook, error) {
	c := cfg.withDefaults()
	if c.KeyFile == "" {
		return nil, errors.New("ops config: ssh key_file is not set")
	}
	if c.KnownHosts == "" {
		return nil, errors.New("ops config: ssh known_hosts is not set: host keys are always checked")
	}
	signer, err := remote.LoadSigner(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("ops config: %w", err)
	}
	hosts := make(map[string]remote.HostConfig, len(c.Hosts))
	for name, h := range c.Hosts {
		hosts[name] = remote.HostConfig{Name: name, Addr: h.Addr, User: h.User, Jump: h.Jump, Prefix: h.Prefix}
	}
	pool, err := remote.NewPool(remote.Config{Hosts: hosts, Signer: signer, KnownHosts: c.KnownHosts,
		ConnectTimeout: c.ConnectTimeout, KeepAlive: c.KeepAlive, Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("ops config: %w", err)
	}
	targets := make(map[string]*target, len(c.Services))
	r := &Runbook{cfg: c, pool: pool}
	routers := map[string]*target{}
	for name, sc := range c.Services {
		t, err := r.newTarget(name, sc)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("ops config: service %s: %w", name, err)
		}
		if rc := routerOf(sc); rc != nil {
			key := rc.Kind + " " + rc.URL
			if o, ok := routers[key]; ok {
				t.router, t.routerErr = o.router, o.routerErr
			} else {
				t.router, t.routerErr = router.New(rc.Kind, rc.URL, routerHTTP())
				routers[key] = t
			}
		}
		targets[name] = t
	}
	r.index = newTargetIndex(targets)
	return r, nil
}

// Close closes every SSH connection and the engine clients' idle connections.
func (r *Runbook) Close() error {
	for _, t := range r.index.byName {
		t.eng.HTTP.CloseIdleConnections()
	}
	return r.pool.Close()
}

// target is one service and the handles a pipeline needs to act on it, built
// once by New.
type target struct {
	name     string
	cfg      ServiceConfig
	host     hostIO // runs systemd and the engine
	node     hostIO // sees host PIDs of GPU processes: the Proxmox node, or host itself
	nodeName string // the physical node: what NodeLocks holds
	unit     systemd.Service
	eng      *engine.Client  // one per service, reused across jobs
	dial     engine.DialFunc // how eng and the benchmark reach the URL (engineDial); nil = directly
	scope    gpu.Scope       // whose processes are the service's

	// sshHost and sshNode are host and node unguarded: what guard binds.
	sshHost, sshNode *remote.Host

	// router is the client of the router in front of a replica
	// (cfg.Replica.Router), one per router shared by its replicas; nil
	// with routerErr set when it could not be made, nil without a router.
	router    router.Client
	routerErr error
}

func (r *Runbook) newTarget(name string, sc ServiceConfig) (*target, error) {
	h, err := r.pool.Host(sc.Host)
	if err != nil {
		return nil, err
	}
	dial, err := engineDial(sc, h)
	if err != nil {
		return nil, err
	}
	t := &target{name: name, cfg: sc, host: h, node: h, nodeName: sc.Host, sshHost: h, sshNode: h,
		unit: systemd.Service{R: h, Unit: sc.Unit, Poll: r.cfg.Poll}, eng: engine.NewVia(sc.URL, dial), dial: dial,
		scope: gpu.Scope{Unit: sc.Unit}}
	if sc.ProxmoxNode != "" {
		if t.sshNode, err = r.pool.Host(sc.ProxmoxNode); err != nil {
			return nil, fmt.Errorf("proxmox node: %w", err)
		}
		t.node, t.nodeName = t.sshNode, sc.ProxmoxNode
		t.scope.VMID, t.scope.Container = sc.VMID, sc.Host
	}
	return t, nil
}

// hostIO is what a pipeline does on a host: a *remote.Host, or one guarded
// by the job's hold (*remote.Guarded).
type hostIO interface {
	Run(ctx context.Context, stdin []byte, argv ...string) (remote.Output, error)
	ReadFile(ctx context.Context, name string) ([]byte, error)
	Lstat(ctx context.Context, name string) (fs.FileInfo, error)
	WriteFileAtomic(ctx context.Context, name string, data []byte, perm os.FileMode) error
}

// guard returns a copy of t whose commands and writes, on its host and its
// node, are sent only while hold is held.
func (t *target) guard(hold remote.Hold) *target {
	g := *t
	g.host, g.node = t.sshHost.Guard(hold), t.sshNode.Guard(hold)
	g.unit.R = g.host
	return &g
}

// target returns the named service's target, bound to r's hold in a copy
// made by For.
func (r *Runbook) target(name string) (*target, error) {
	t, ok := r.index.byName[name]
	if !ok {
		_, err := r.cfg.service(name)
		return nil, err
	}
	return r.bind(t), nil
}

// bind returns t (one of r.index's) as r's pipelines use it: bound to r's
// hold in a copy made by For, the same *target for every call on r.
func (r *Runbook) bind(t *target) *target {
	if r.bound == nil {
		return t
	}
	r.bound.mu.Lock()
	defer r.bound.mu.Unlock()
	g, ok := r.bound.m[t.name]
	if !ok {
		g = t.guard(r.hold)
		r.bound.m[t.name] = g
	}
	return g
}

// targets returns the named services' targets (names from r.index), bound
// as target binds them, in the order given.
func (r *Runbook) targets(names []string) []*target {
	out := make([]*target, len(names))
	for i, n := range names {
		out[i] = r.bind(r.index.byName[n])
	}
	return out
}
