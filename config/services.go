package config

import (
	"slices"
	"strings"

	"github.com/opsbot/opsbot/ops/engine"
)

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
	// speculative config file that a per-load change writes beside the unit;
	// "" = AdaptiveConfigDefault(name). It lies under AdaptiveRoot or
	// AdaptiveDir and is no other path the config names (adaptive.go).
	AdaptiveConfig string `yaml:"adaptive_config,omitempty"`
	// AdaptiveDir is one more directory on the service's host, besides
	// AdaptiveRoot, that AdaptiveConfig may lie under ("" = none).
	AdaptiveDir string `yaml:"adaptive_dir,omitempty"`
	// AutoRecover lets the watchdog run `gpu recover` on a restart loop or a
	// down service by itself instead of offering it.
	AutoRecover bool `yaml:"auto_recover,omitempty"`
	// ViaSSH reaches URL through the SSH connection to Host (a direct-tcpip
	// channel, dialled from the host's side: 127.0.0.1 is the host's own
	// loopback) for every use of it: readiness, /server_info, the cache
	// flush, metrics, the benchmark, the watchdog and `opsbot bench
	// --service`. The host's sshd needs AllowTcpForwarding yes (or local).
	ViaSSH bool `yaml:"via_ssh,omitempty"`
	// Replicas run the service on several hosts (replicas.go): each is a
	// service of its own, NAME@REPLICA (Config.Instances), sharing every
	// other key of this one; the service then has no host, url, gpus or
	// proxmox of its own.
	Replicas []Replica `yaml:"replicas,omitempty"`
	// Router is the router in front of the replicas (nil: none).
	Router *Router `yaml:"router,omitempty"`
}

// validateSSH checks that services have the SSH key and known_hosts they
// are reached with.
func (c *Config) validateSSH(bad func(string, ...any)) {
	if len(c.Services) > 0 {
		if c.SSH.KeyFile == "" {
			bad("ssh.key_file is required when services are configured")
		}
		if c.SSH.KnownHosts == "" {
			bad("ssh.known_hosts is required: host keys are always checked")
		}
	}
}

// validateHosts checks each host, by name: its name, address, user and jump.
func (c *Config) validateHosts(bad func(string, ...any)) {
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
}

// validateServices checks each service, by name, then default_service.
func (c *Config) validateServices(bad func(string, ...any)) {
	ins := c.Instances()
	for _, name := range sortedKeys(c.Services) {
		c.validateService(name, c.Services[name], ins, bad)
	}
	if d := c.DefaultService; d != "" {
		if names := c.NamedServices(); !slices.Contains(names, d) {
			bad("default_service names unknown service %q (the services are %s)", d, strings.Join(names, ", "))
		}
	}
}

// validateService checks the service named name; ins are every instance
// (a replicated service's replicas are checked against them).
func (c *Config) validateService(name string, s Service, ins []Instance, bad func(string, ...any)) {
	if !nameRE.MatchString(name) {
		bad("services.%s: names are lower-case letters, digits, '.', '_' and '-'", name)
	}
	if len(s.Replicas) > 0 {
		c.validateGroup(name, s, ins, bad)
		c.validateShared(name, s, bad)
		return
	}
	if s.Router != nil {
		bad("services.%s.router: only a service with replicas has a router (services.%s.replicas)", name, name)
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
	if _, err := engine.Addr(s.URL); err != nil {
		bad("services.%s.url %v, got %q", name, err, s.URL)
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
	c.validateShared(name, s, bad)
}

// validateShared checks the keys a replicated service shares with its
// replicas, and a plain service has too: engine, edit, default_steps and
// the adaptive config.
func (c *Config) validateShared(name string, s Service, bad func(string, ...any)) {
	if s.Engine != "sglang" && s.Engine != "vllm" {
		bad("services.%s.engine must be sglang or vllm, got %q", name, s.Engine)
	}
	if s.Edit != "in-place" && s.Edit != "drop-in" {
		bad("services.%s.edit must be in-place or drop-in, got %q", name, s.Edit)
	}
	if s.DefaultSteps < 0 || s.DefaultSteps > c.Limits.MaxSteps {
		bad("services.%s.default_steps must be within 1..%d", name, c.Limits.MaxSteps)
	}
	c.validateAdaptive(name, s, bad)
}

// AdaptiveConfigDefault is where a service's adaptive speculative config file
// goes when services.NAME.adaptive_config is not set.
func AdaptiveConfigDefault(service string) string {
	return AdaptiveRoot + "/" + service + "-adaptive.json"
}

// AdaptiveConfigPath is the service's adaptive config path: its
// adaptive_config, else AdaptiveConfigDefault(name).
func (s Service) AdaptiveConfigPath(name string) string {
	if s.AdaptiveConfig != "" {
		return s.AdaptiveConfig
	}
	return AdaptiveConfigDefault(name)
}
