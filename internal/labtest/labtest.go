// Package labtest wires the lab (the simulated GPU hosts) to the ops layer for
// tests: it starts a lab that closes with the test, writes the client key and
// known_hosts it needs, opens an SSH pool on its hosts, and makes the ops
// config that reaches its services.
package labtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/remote"
)

// Start starts a lab with opts; it is closed when the test ends.
func Start(t testing.TB, opts lab.Options) *lab.Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lab.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start lab: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Files writes the lab's client key and known_hosts into a temp dir and
// returns their paths.
func Files(t testing.TB, l *lab.Lab) (key, knownHosts string) {
	t.Helper()
	return files(t, l.Topology())
}

func files(t testing.TB, top lab.Topology) (key, knownHosts string) {
	t.Helper()
	dir := t.TempDir()
	key, knownHosts = filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(key, top.ClientKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(knownHosts, top.KnownHosts, 0o600); err != nil {
		t.Fatal(err)
	}
	return key, knownHosts
}

// Pool opens an SSH pool on every lab host, plus the extra host configs given
// (for example a prefixed host); it is closed when the test ends.
func Pool(t testing.TB, l *lab.Lab, extra ...remote.HostConfig) *remote.Pool {
	t.Helper()
	_, kh := Files(t, l)
	signer, err := l.ClientSigner()
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]remote.HostConfig{}
	for _, h := range l.Topology().Hosts {
		hosts[h.Name] = remote.HostConfig{Name: h.Name, Addr: h.Addr, User: h.User}
	}
	for _, h := range extra {
		hosts[h.Name] = h
	}
	pool, err := remote.NewPool(remote.Config{Hosts: hosts, Signer: signer, KnownHosts: kh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// Host returns the pool's host name, failing the test when it is unknown.
func Host(t testing.TB, p *remote.Pool, name string) *remote.Host {
	t.Helper()
	h, err := p.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// OpsConfig is an ops config that reaches every host and service of topo (a
// lab's, or a fleet's), with its key and known_hosts written as Files does,
// each service ready within readyTimeout; the caller sets the rest
// (benchmark, timings, locks, Rollout). A replica (lab.Options.Replicas) is
// the service GROUP@REPLICA ("qwen@gpu1") with Replica set, its router the
// lab's (kind sglang, the worker URL its url), as config makes it from
// services.NAME.replicas.
func OpsConfig(t testing.TB, topo lab.Topology, readyTimeout time.Duration) ops.Config {
	t.Helper()
	key, kh := files(t, topo)
	cfg := ops.Config{KeyFile: key, KnownHosts: kh, Hosts: map[string]ops.HostConfig{}, Services: map[string]ops.ServiceConfig{}}
	for _, h := range topo.Hosts {
		cfg.Hosts[h.Name] = ops.HostConfig{Addr: h.Addr, User: h.User}
	}
	routers := map[string]lab.RouterInfo{}
	for _, r := range topo.Routers {
		routers[r.Group] = r
	}
	replicas := map[string]int{} // each group's replicas so far, in the topology's order
	for _, s := range topo.Services {
		sc := ops.ServiceConfig{Host: s.Host, Unit: s.Unit, URL: s.URL, Engine: s.Engine, GPUs: s.GPUs,
			ProxmoxNode: s.ProxmoxNode, VMID: s.VMID, ReadyTimeout: readyTimeout, AdaptiveConfig: config.AdaptiveConfigDefault(s.Name)}
		name := s.Name
		if s.Group != "" {
			name = ops.ReplicaName(s.Group, s.Replica)
			sc.AdaptiveConfig = config.AdaptiveConfigDefault(s.Group)
			sc.Replica = &ops.ReplicaOf{Group: s.Group, Name: s.Replica, Index: replicas[s.Group]}
			replicas[s.Group]++
			if r, ok := routers[s.Group]; ok {
				sc.Replica.Router = &ops.RouterConfig{URL: r.URL, Kind: r.Kind, Worker: s.URL}
			}
		}
		cfg.Services[name] = sc
	}
	return cfg
}

// StartReplicas starts a lab whose qwen runs as n replicas (2 to 8)
// qwen@gpu1 ... qwen@gpuN behind the lab's router (lab.Options.Replicas;
// opts.Replicas is set to n), closed with the test, and waits until every
// replica serves. OpsConfig(t, l.Topology(), ...) and Runbook reach them.
func StartReplicas(t testing.TB, n int, opts lab.Options) *lab.Lab {
	t.Helper()
	opts.Replicas = n
	l := Start(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range l.Topology().Services {
		if err := l.WaitReady(ctx, s.Name); err != nil {
			t.Fatalf("lab replica %s: %v", s.Name, err)
		}
	}
	return l
}

// Runbook is the ops layer on l's hosts as cmd/opsbot builds it from a
// config, with short benchmarks, its node locks held by nodes (nil: within
// the process), once every lab service is ready. It closes with the test.
func Runbook(t testing.TB, l *lab.Lab, nodes ops.Locker) (*ops.Runbook, error) {
	topo := l.Topology()
	cfg := OpsConfig(t, topo, 60*time.Second)
	cfg.Bench = ops.BenchDefaults{Prompts: 4, Concurrency: 2, InputLen: 32, OutputLen: 48}
	cfg.MaxSteps, cfg.NodeLocks = 16, nodes
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range topo.Services {
		if err := l.WaitReady(ctx, s.Name); err != nil {
			return nil, fmt.Errorf("lab service %s: %w", s.Name, err)
		}
	}
	rb, err := ops.New(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { rb.Close() })
	return rb, nil
}
