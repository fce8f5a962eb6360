package ops

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/systemd"
)

// Runbook runs the pipelines against the configured hosts. It holds one SSH
// connection per host, opened on first use and reused by every job. Its methods
// are safe for concurrent use; the job engine makes sure only one mutating job
// runs per host at a time.
type Runbook struct {
	cfg  Config
	pool *remote.Pool
}

// New checks cfg and returns a Runbook. It reads the SSH key but connects to
// nothing until a job needs a host.
func New(cfg Config) (*Runbook, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("ops config: %w", err)
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
	return &Runbook{cfg: c, pool: pool}, nil
}

// Close closes every SSH connection.
func (r *Runbook) Close() error { return r.pool.Close() }

func (c *Config) validate() error {
	if c.KeyFile == "" {
		return errors.New("ssh key_file is not set")
	}
	if c.KnownHosts == "" {
		return errors.New("ssh known_hosts is not set: host keys are always checked")
	}
	for name, h := range c.Hosts {
		if h.Addr == "" {
			return fmt.Errorf("host %s: no addr", name)
		}
		if h.Jump != "" {
			if _, ok := c.Hosts[h.Jump]; !ok {
				return fmt.Errorf("host %s: jump host %q is not configured", name, h.Jump)
			}
		}
	}
	names := make([]string, 0, len(c.Services))
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s := c.Services[name]
		h, ok := c.Hosts[s.Host]
		if !ok {
			return fmt.Errorf("service %s: host %q is not configured", name, s.Host)
		}
		if len(h.Prefix) > 0 {
			// Unit files are read and written over sftp, which a prefix does not reach.
			return fmt.Errorf("service %s: host %s has a command prefix: the unit's files must be reachable over sftp, so give the service's host its own SSH (a prefix suits hosts used for commands only)", name, s.Host)
		}
		if s.ProxmoxNode != "" {
			if _, ok := c.Hosts[s.ProxmoxNode]; !ok {
				return fmt.Errorf("service %s: proxmox node %q is not configured", name, s.ProxmoxNode)
			}
		}
		if s.Unit == "" {
			return fmt.Errorf("service %s: no unit", name)
		}
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("service %s: url %q is not an http(s) URL", name, s.URL)
		}
		if s.Engine != "sglang" && s.Engine != "vllm" {
			return fmt.Errorf("service %s: engine %q (want sglang or vllm)", name, s.Engine)
		}
	}
	return nil
}

// target is one service and the handles a pipeline needs to act on it.
type target struct {
	name     string
	cfg      ServiceConfig
	host     *remote.Host // runs systemd and the engine
	node     *remote.Host // sees host PIDs of GPU processes: the Proxmox node, or host itself
	nodeName string
	unit     systemd.Service
	eng      *engine.Client
}

func (r *Runbook) target(name string) (*target, error) {
	sc, err := r.cfg.service(name)
	if err != nil {
		return nil, err
	}
	h, err := r.pool.Host(sc.Host)
	if err != nil {
		return nil, err
	}
	t := &target{name: name, cfg: sc, host: h, node: h, nodeName: sc.Host,
		unit: systemd.Service{R: h, Unit: sc.Unit, Poll: r.cfg.Poll}, eng: engine.New(sc.URL)}
	if sc.ProxmoxNode != "" {
		if t.node, err = r.pool.Host(sc.ProxmoxNode); err != nil {
			return nil, err
		}
		t.nodeName = sc.ProxmoxNode
	}
	return t, nil
}

// Run runs the pipeline of cmd, reporting progress to rep. The returned Result
// is non-nil whenever anything was learned or changed, also on error.
func (r *Runbook) Run(ctx context.Context, cmd *commands.Command, rep Reporter) (*Result, error) {
	if rep == nil {
		rep = Discard
	}
	switch cmd.Spec.Path {
	case "mtp steps":
		return r.MTPSteps(ctx, cmd.Service, cmd.Steps, cmd.DryRun, rep)
	case "mtp show":
		return r.MTPShow(ctx, cmd.Service, rep)
	case "gpu status":
		return r.GPUStatus(ctx, cmd.Host, rep)
	case "gpu recover":
		return r.GPURecover(ctx, cmd.Service, RecoverOptions{NoStart: cmd.NoStart, Force: cmd.Force, DryRun: cmd.DryRun}, rep)
	case "svc start", "svc stop", "svc restart":
		return r.ServiceAction(ctx, cmd.Service, cmd.Spec.Path[len("svc "):], cmd.DryRun, rep)
	case "svc status":
		return r.ServiceStatus(ctx, cmd.Service, rep)
	case "svc logs":
		return r.ServiceLogs(ctx, cmd.Service, cmd.Lines, rep)
	case "bench":
		return r.Bench(ctx, cmd.Service, cmd.Bench, cmd.DryRun, rep)
	case "sweep":
		return r.Sweep(ctx, cmd.Service, cmd.SweepSteps, cmd.DryRun, rep)
	}
	return nil, fmt.Errorf("%q is not a host command", cmd.Spec.Path)
}
