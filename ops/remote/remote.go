// Package remote runs commands and transfers files on the hosts opsbot operates, over SSH.
//
// A Pool keeps one SSH connection per host and reuses it for every command (a new session per
// command, never a new handshake), dialling lazily, through a jump host when configured. Host
// keys are checked against a known_hosts file; an unknown or changed key is refused with a
// *HostKeyError. Keep-alives detect dead connections, which are then closed so that the next
// call dials again. Files are read and written with sftp over the same connection.
package remote

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Output of a remote command that ran. A non-zero exit is not an error.
type Output struct {
	Stdout, Stderr []byte
	ExitStatus     int    // -1 when killed by a signal
	Signal         string // "KILL", "TERM"... when killed by a signal, else ""
}

// HostConfig says how to reach one host.
type HostConfig struct {
	Name   string
	Addr   string   // host:port
	User   string   // login user
	Jump   string   // name of another configured host to tunnel through ("" = direct)
	Prefix []string // argv prefix for every command, e.g. {"pct","exec","129","--"}
}

// Config configures a Pool.
type Config struct {
	Hosts            map[string]HostConfig // by name; HostConfig.Name "" takes the map key
	Signer           ssh.Signer            // client key (required)
	KnownHosts       string                // known_hosts file path (required; checked with knownhosts)
	ConnectTimeout   time.Duration         // TCP connect (0: DefaultConnectTimeout)
	HandshakeTimeout time.Duration         // SSH handshake+auth (0: DefaultHandshakeTimeout)
	KeepAlive        time.Duration         // keepalive@openssh.com interval (0: DefaultKeepAlive; <0 off)
	Logger           *slog.Logger          // nil = discard
}

// Defaults of Config. DefaultConnectTimeout and DefaultKeepAlive are also
// opsbot's ssh.connect_timeout and ssh.keepalive when the config leaves them
// unset (the config package takes them from here).
const (
	DefaultConnectTimeout   = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultKeepAlive        = 30 * time.Second
)

// ErrOutcomeUnknown is wrapped by Run's error when the connection broke after the command was
// sent: it may or may not have run, and Run does not send it again.
var ErrOutcomeUnknown = errors.New("outcome unknown: connection lost after the command was sent")

// ErrClosed is returned by calls on a closed Pool.
var ErrClosed = errors.New("ssh pool closed")

// Pool holds one SSH connection per host. It is safe for concurrent use.
type Pool struct {
	cfg   Config
	kh    *knownHosts
	log   *slog.Logger
	hosts map[string]*Host

	mu       sync.Mutex
	conns    map[string]*conn
	dials    int
	dialErrs map[string]int
	closed   bool
}

// Host runs commands on one host over the pool's shared connection. It is safe for concurrent
// use.
type Host struct {
	p    *Pool
	cfg  HostConfig
	sem  chan struct{} // held while dialling: one handshake at a time per host
	sftp sftpCache
}

// NewPool validates cfg (hosts, addresses, users, jump chains, signer, a readable known_hosts
// file) and returns a Pool. It dials nothing: connections are made on first use.
func NewPool(cfg Config) (*Pool, error) {
	if cfg.Signer == nil {
		return nil, errors.New("new ssh pool: no client key (Signer)")
	}
	if cfg.KnownHosts == "" {
		return nil, errors.New("new ssh pool: no known_hosts file")
	}
	kh, err := loadKnownHosts(cfg.KnownHosts)
	if err != nil {
		return nil, fmt.Errorf("new ssh pool: %w", err)
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("new ssh pool: no hosts")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{cfg: cfg, kh: kh, log: cfg.Logger, hosts: map[string]*Host{}, conns: map[string]*conn{}}
	for name, hc := range cfg.Hosts {
		if hc.Name == "" {
			hc.Name = name
		}
		if hc.Name != name {
			return nil, fmt.Errorf("new ssh pool: host %q is configured under key %q", hc.Name, name)
		}
		if hc.Addr == "" || !strings.Contains(hc.Addr, ":") {
			return nil, fmt.Errorf("new ssh pool: host %s: address %q is not host:port", name, hc.Addr)
		}
		if hc.User == "" {
			return nil, fmt.Errorf("new ssh pool: host %s: no user", name)
		}
		hc.Prefix = append([]string(nil), hc.Prefix...)
		p.hosts[name] = &Host{p: p, cfg: hc, sem: make(chan struct{}, 1)}
	}
	for name := range p.hosts {
		seen := map[string]bool{name: true}
		for j := p.hosts[name].cfg.Jump; j != ""; j = p.hosts[j].cfg.Jump {
			if _, ok := p.hosts[j]; !ok {
				return nil, fmt.Errorf("new ssh pool: host %s: jump host %q is not configured (hosts: %s)", name, j, p.names())
			}
			if seen[j] {
				return nil, fmt.Errorf("new ssh pool: host %s: jump hosts form a loop through %s", name, j)
			}
			seen[j] = true
		}
	}
	return p, nil
}

func (p *Pool) names() string {
	n := make([]string, 0, len(p.hosts))
	for k := range p.hosts {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}

// Host returns the named host. An unknown name is an error listing the configured names.
func (p *Pool) Host(name string) (*Host, error) {
	h, ok := p.hosts[name]
	if !ok {
		return nil, fmt.Errorf("unknown host %q (configured: %s)", name, p.names())
	}
	return h, nil
}

// Name is the host's configured name.
func (h *Host) Name() string { return h.cfg.Name }

// Config is the host's configuration.
func (h *Host) Config() HostConfig {
	c := h.cfg
	c.Prefix = append([]string(nil), c.Prefix...)
	return c
}

// Dials is the number of successful SSH handshakes so far, jump hosts included.
func (p *Pool) Dials() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dials
}

// HostState is one host's connection as Stats reports it.
type HostState struct {
	Name       string
	Connected  bool // a live connection is cached
	DialErrors int  // failed dials (TCP, handshake, host key) so far
}

// Stats returns every configured host's connection state, sorted by name.
func (p *Pool) Stats() []HostState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]HostState, 0, len(p.hosts))
	for name := range p.hosts {
		c := p.conns[name]
		out = append(out, HostState{Name: name, Connected: c != nil && !c.dead(), DialErrors: p.dialErrs[name]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Drop closes the cached connection to the named host, if any; the next call dials again.
// Commands running on it end with an error.
func (p *Pool) Drop(name string) {
	p.mu.Lock()
	c := p.conns[name]
	delete(p.conns, name)
	p.mu.Unlock()
	if c != nil {
		c.close()
	}
}

// Close closes every connection; later calls fail with ErrClosed. Running commands end with an
// error.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	cs := p.conns
	p.conns = map[string]*conn{}
	p.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
	return nil
}
