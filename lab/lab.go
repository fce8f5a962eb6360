// Package lab simulates the GPU hosts opsbot operates, faithfully enough that the incident of a
// restart loop on GPU memory held by dead processes can be replayed against it over real SSH.
//
// A Lab runs one SSH server per simulated host on 127.0.0.1 (ed25519 host keys, public-key auth,
// exec, sftp, and direct-tcpip channels to the host's own engines): a Proxmox node ("pve") with
// 8 simulated H100 GPUs split between two LXC containers, each running systemd and its own
// engine service: "gpu1" (VMID 129) runs the default service qwen (SGLang-like or vLLM-like) on
// GPUs 0-3, "gpu2" (VMID 130) runs the neighbour's SGLang service coder on GPUs 4-7. Faults
// apply to both. Commands arrive as POSIX-quoted strings and run against simulated state:
// systemctl, journalctl, nvidia-smi, ps, cat (with /proc and /sys/fs/cgroup), fuser, kill, pct
// exec and a few shell utilities.
// Faults (see Fault) make it fail the way real hosts do.
//
// All lab time (model load, warm-up, RestartSec, TimeoutStopSec, start limits, GPU memory release
// lag) is simulated time divided by Options.TimeScale. The lab imports nothing of opsbot except
// its own engine package.
package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Options configure a Lab. The zero value is the default incident topology.
type Options struct {
	Faults    []Fault // see ParseFaults
	UnitText  string  // qwen's unit; "" = the default SGLang NEXTN unit at steps 3 with Restart=always
	Engine    string  // "sglang" (default) or "vllm": qwen's default unit's engine (coder is SGLang)
	TimeScale float64 // simulated seconds per real second; 0 = DefaultTimeScale
	Dir       string  // keys and host file systems; "" = a temp dir removed by Close
	Logger    *slog.Logger
	// LoadTime is the simulated model load time (0 = 60s); WarmUp the /health 503 phase (0 = 10s);
	// ReleaseLag how long GPU memory stays used after its holder died (0 = 5s).
	LoadTime, WarmUp, ReleaseLag time.Duration
	// GPUs is the number of simulated GPUs of the node (0 = 8); the services need GPUs 0-7.
	GPUs int
	// Node names the Proxmox node ("" = "pve").
	Node string
	// LoopbackEngines binds each engine to its host's loopback only, as
	// `--host 127.0.0.1` does on a real host: it is reached through that
	// host's SSH server (a direct-tcpip channel to the service's URL, which
	// names 127.0.0.1 there), and nothing answers on the URL from the
	// machine running the lab.
	LoopbackEngines bool
	// Services, when 1 to 8, replaces qwen and coder with that many SGLang
	// services splitting the node's GPUs evenly, named NODE-sI in containers
	// NODE-ctI (VMIDs 201, 202, ...). StartFleet puts N of them on N/4 nodes.
	Services int
	// Replicas, when 2 to 8, replaces qwen and coder with that many
	// replicas of qwen (its unit, UnitText or Engine's default, each on 4
	// GPUs of its own: CUDA_VISIBLE_DEVICES=0,1,2,3 rewritten) in
	// containers gpu1, gpu2, ... (VMIDs 129, 130, ...), named qwen@gpu1,
	// qwen@gpu2, ... (Group "qwen"), behind one lab router (Router) that
	// lists them all from the start. GPUs defaults to 4 per replica.
	Replicas int
	// RouterRetries is the lab router's Retries (RouterOptions; 0 = none).
	RouterRetries int
}

// ReplicaGroup is the name of the replicated service Options.Replicas runs.
const ReplicaGroup = "qwen"

// ReplicaGPUs is how many GPUs each of Options.Replicas' replicas runs on.
const ReplicaGPUs = 4

// DefaultTimeScale makes a default model load take about 2.4 s of wall-clock time.
const DefaultTimeScale = 25

// Lab is a running simulation. Its methods are safe for concurrent use.
type Lab struct {
	opts      Options
	w         *world
	dir       string
	removeDir bool
	log       *slog.Logger
	hosts     []*SimHost
	clientPEM []byte
	clientPub ssh.PublicKey
	services  []ServiceInfo
	router    *Router // Options.Replicas' router; nil without replicas
	faults    *faultSet
	seedArgv  map[string][]string // unit -> argv the lab was seeded with
	wg        sync.WaitGroup      // http servers, the restart-loop fault's restart
	closeOnce sync.Once
	done      chan struct{} // closed by Close: what the lab runs of its own stops
}

// HostInfo is how to reach one simulated host.
type HostInfo struct {
	Name        string
	Addr        string // 127.0.0.1:PORT
	User        string
	HostKeyLine string // known_hosts line for this host
}

// ServiceInfo describes one simulated inference service.
type ServiceInfo struct {
	Name        string // "qwen"; a replica's GROUP@REPLICA: "qwen@gpu1"
	Group       string // a replica's replicated service ("qwen"); "" for a service of its own
	Replica     string // a replica's name in its group: its host ("gpu1")
	Unit        string // "sglang-qwen.service"
	Host        string // "gpu1"
	URL         string // http://127.0.0.1:PORT
	Engine      string // "sglang" or "vllm"
	ProxmoxNode string // "pve"
	VMID        int
	GPUs        []int
}

// RouterInfo is the router in front of a replicated service's replicas.
type RouterInfo struct {
	Group string // the replicated service ("qwen")
	URL   string // http://127.0.0.1:PORT: its worker API and the service's requests
	Kind  string // the API it speaks: "sglang" (SGLang Model Gateway's /workers)
}

// Topology is everything a config needs to reach the lab.
type Topology struct {
	Hosts        []HostInfo
	KnownHosts   []byte // known_hosts content for all hosts ([127.0.0.1]:PORT form)
	ClientKeyPEM []byte // OpenSSH private key accepted by all hosts
	Services     []ServiceInfo
	Routers      []RouterInfo
}

// Start builds the default topology, seeds the unit, starts the SSH servers and boots the
// service (Start does not wait until it is ready: see WaitReady). It fails on invalid options
// (unknown engine, unreadable Dir) and changes nothing it does not clean up.
func Start(ctx context.Context, opts Options) (*Lab, error) {
	if opts.Engine == "" {
		opts.Engine = "sglang"
	}
	if opts.Engine != "sglang" && opts.Engine != "vllm" {
		return nil, fmt.Errorf("start lab: unknown engine %q (want sglang or vllm)", opts.Engine)
	}
	if opts.TimeScale < 0 {
		return nil, fmt.Errorf("start lab: negative time scale %v", opts.TimeScale)
	}
	if opts.TimeScale == 0 {
		opts.TimeScale = DefaultTimeScale
	}
	if opts.LoadTime <= 0 {
		opts.LoadTime = 60 * time.Second
	}
	if opts.WarmUp <= 0 {
		opts.WarmUp = 10 * time.Second
	}
	if opts.ReleaseLag <= 0 {
		opts.ReleaseLag = 5 * time.Second
	}
	if opts.Replicas != 0 && (opts.Replicas < 2 || opts.Replicas > 8 || opts.Services != 0) {
		return nil, fmt.Errorf("start lab: %d replicas: want 2 to 8, and no Services beside them", opts.Replicas)
	}
	if opts.GPUs <= 0 {
		opts.GPUs = max(8, ReplicaGPUs*opts.Replicas)
	}
	if opts.Replicas > 0 && opts.GPUs < ReplicaGPUs*opts.Replicas {
		return nil, fmt.Errorf("start lab: %d replicas of %d GPUs each need %d GPUs, not %d", opts.Replicas, ReplicaGPUs, ReplicaGPUs*opts.Replicas, opts.GPUs)
	}
	if opts.Node == "" {
		opts.Node = "pve"
	}
	if opts.Services < 0 || opts.Services > opts.GPUs {
		return nil, fmt.Errorf("start lab: %d services on %d GPUs: want 0 (qwen and coder) to %d", opts.Services, opts.GPUs, opts.GPUs)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Lab{opts: opts, log: opts.Logger, seedArgv: map[string][]string{}, done: make(chan struct{})}
	fs := newFaultSet(opts.Faults)
	l.faults = &fs
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "opsbot-lab-")
		if err != nil {
			return nil, fmt.Errorf("start lab: %w", err)
		}
		l.dir, l.removeDir = d, true
	} else {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("start lab: create dir: %w", err)
		}
		l.dir = opts.Dir
	}
	if err := l.boot(ctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("start lab: %w", err)
	}
	if err := l.applyGPUFaults(); err != nil {
		l.Close()
		return nil, fmt.Errorf("start lab: %w", err)
	}
	l.armRestartLoop()
	return l, nil
}

func (l *Lab) boot(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	key, err := loadOrCreateKey(filepath.Join(l.dir, "id_ed25519"), "opsbot-lab-client")
	if err != nil {
		return err
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return fmt.Errorf("client key: %w", err)
	}
	l.clientPub = signer.PublicKey()
	l.clientPEM, err = os.ReadFile(filepath.Join(l.dir, "id_ed25519"))
	if err != nil {
		return err
	}

	w := newWorld(l.opts.TimeScale, l.log)
	w.releaseLag = l.opts.ReleaseLag
	w.slowdown = l.faults.slowEngine
	l.w = w
	for i := 0; i < l.opts.GPUs; i++ {
		w.gpus = append(w.gpus, &gpu{index: i, uuid: fmt.Sprintf("GPU-%08x-5c1e-4b7a-9d3f-%012x", 0x3f2a7c10+i*0x1111, 0xa1b2c3d40000+i), name: "NVIDIA H100 80GB HBM3", total: 81559,
			hw: healthyGPU()})
	}

	pve, err := l.newHost(l.opts.Node, nil)
	if err != nil {
		return err
	}
	w.node = pve
	w.lock()
	initP := &proc{hostPID: 1, state: 'S', stat: "Ss", args: []string{"/sbin/init"}, cgroup: "/init.scope", mem: map[int]int{}, started: time.Now()}
	w.procs[1] = initP
	w.spawn(nil, nil, []string{"/usr/sbin/sshd", "-D"}, "/system.slice/ssh.service").stat = "Ss"
	he := w.spawn(nil, nil, []string{"/usr/bin/nv-hostengine", "-n", "--service-account", "nvidia-dcgm"}, "/system.slice/nvidia-dcgm.service")
	he.daemon, he.gpuFDs, he.stat = true, true, "Ssl"
	w.unlock()
	if err := l.seedFiles(pve, map[string]string{
		"/etc/hostname":   l.opts.Node + "\n",
		"/etc/os-release": "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n",
	}); err != nil {
		return err
	}
	if err := l.startPersistenced(pve); err != nil {
		return err
	}

	// The default service, qwen, in LXC 129 on GPUs 0-3, exactly as the incident's host.
	qwenUnit, qwenText := "sglang-qwen.service", l.opts.UnitText
	if l.opts.Engine == "vllm" {
		qwenUnit = "vllm-qwen.service"
	}
	if qwenText == "" {
		qwenText = defaultUnit(l.opts.Engine)
	}
	// Its neighbour, coder, in LXC 130 on GPUs 4-7: another team's SGLang service.
	services := []labService{
		{name: "qwen", ct: "gpu1", vmid: 129, unit: qwenUnit, text: qwenText, engine: l.opts.Engine, gpus: []int{0, 1, 2, 3},
			model: "/models/Qwen3.5-122B-A10B", modelConfig: "{\"architectures\": [\"Qwen3_5MoeForCausalLM\"], \"model_type\": \"qwen3_5_moe\"}\n"},
		{name: "coder", ct: "gpu2", vmid: 130, unit: "sglang-coder.service", text: coderUnit, engine: "sglang", gpus: []int{4, 5, 6, 7},
			model: "/models/Qwen3-Coder-30B-A3B-Instruct", modelConfig: "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\"}\n"},
	}
	if n := l.opts.Replicas; n > 0 {
		if !strings.Contains(qwenText, "CUDA_VISIBLE_DEVICES=0,1,2,3\n") {
			return fmt.Errorf("replicas: qwen's unit must set CUDA_VISIBLE_DEVICES=0,1,2,3 (each replica's line is rewritten to its own GPUs)")
		}
		services = nil
		for i := range n {
			gpus := make([]int, ReplicaGPUs)
			dev := make([]string, ReplicaGPUs)
			for j := range gpus {
				gpus[j] = i*ReplicaGPUs + j
				dev[j] = fmt.Sprint(gpus[j])
			}
			ct := fmt.Sprintf("gpu%d", i+1)
			text := strings.Replace(qwenText, "CUDA_VISIBLE_DEVICES=0,1,2,3\n", "CUDA_VISIBLE_DEVICES="+strings.Join(dev, ",")+"\n", 1)
			services = append(services, labService{name: ReplicaGroup + "@" + ct, group: ReplicaGroup, ct: ct, vmid: 129 + i,
				unit: qwenUnit, text: text, engine: l.opts.Engine, gpus: gpus,
				model: "/models/Qwen3.5-122B-A10B", modelConfig: "{\"architectures\": [\"Qwen3_5MoeForCausalLM\"], \"model_type\": \"qwen3_5_moe\"}\n"})
		}
	}
	if n := l.opts.Services; n > 0 {
		services = nil
		per := l.opts.GPUs / n
		for i := 0; i < n; i++ {
			gpus := make([]int, per)
			dev := make([]string, per)
			for j := range gpus {
				gpus[j] = i*per + j
				dev[j] = fmt.Sprint(i*per + j)
			}
			name := fmt.Sprintf("%s-s%d", l.opts.Node, i+1)
			text := strings.NewReplacer("CUDA_VISIBLE_DEVICES=4,5,6,7", "CUDA_VISIBLE_DEVICES="+strings.Join(dev, ","),
				"--tp 4", fmt.Sprintf("--tp %d", per), "--served-model-name coder", "--served-model-name "+name).Replace(coderUnit)
			services = append(services, labService{name: name, ct: fmt.Sprintf("%s-ct%d", l.opts.Node, i+1), vmid: 201 + i,
				unit: "sglang-" + name + ".service", text: text, engine: "sglang", gpus: gpus,
				model: "/models/Qwen3-Coder-30B-A3B-Instruct", modelConfig: "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\"}\n"})
		}
	}
	for _, s := range services {
		if err := l.addService(pve, s); err != nil {
			return err
		}
	}
	if l.opts.Replicas > 0 {
		var urls []string
		for _, s := range l.services {
			urls = append(urls, s.URL)
		}
		r, err := StartRouter(RouterOptions{Workers: urls, Retries: l.opts.RouterRetries, Logger: l.log})
		if err != nil {
			return err
		}
		l.router = r
	}

	for _, h := range l.hosts {
		if err := h.serveSSH(); err != nil {
			return err
		}
	}
	return nil
}

// labService is one container of the node and the engine service it runs.
type labService struct {
	name, ct    string // service and container (host) name
	group       string // a replica's group; "" for a service of its own
	vmid        int
	unit, text  string
	engine      string
	gpus        []int // node GPU indexes its unit's CUDA_VISIBLE_DEVICES names
	model       string
	modelConfig string
}

// addService creates s's LXC container on the node (its config, init, journald and sshd), seeds
// its unit and model, and boots the unit.
func (l *Lab) addService(pve *SimHost, s labService) error {
	w := l.w
	for _, g := range s.gpus {
		if w.gpuByIndex(g) == nil {
			return fmt.Errorf("service %s: the node has no GPU %d (Options.GPUs is %d)", s.name, g, l.opts.GPUs)
		}
	}
	w.lock()
	mon := w.spawn(nil, nil, []string{fmt.Sprintf("[lxc monitor] /var/lib/lxc %d", s.vmid)}, fmt.Sprintf("/lxc.monitor/%d", s.vmid))
	mon.stat = "Ss"
	ct := &container{vmid: s.vmid, name: s.ct, running: true}
	ctInit := w.spawn(nil, mon, []string{"/sbin/init"}, "/init.scope")
	ctInit.ct, ctInit.pid, ctInit.ppid, ctInit.stat = ct, 1, 0, "Ss"
	ct.initPID, ct.nextPID = ctInit.hostPID, 1
	w.containers[s.vmid] = ct
	w.unlock()

	h, err := l.newHost(s.ct, ct)
	if err != nil {
		return err
	}
	ct.host = h
	w.lock()
	w.spawn(ct, nil, []string{"/lib/systemd/systemd-journald"}, "/system.slice/systemd-journald.service").stat = "Ss"
	w.spawn(ct, nil, []string{"sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"}, "/system.slice/ssh.service").stat = "Ss"
	w.unlock()

	var mounts strings.Builder
	for _, g := range s.gpus {
		fmt.Fprintf(&mounts, "lxc.mount.entry: /dev/nvidia%d dev/nvidia%d none bind,optional,create=file\n", g, g)
	}
	if err := l.seedFiles(pve, map[string]string{
		fmt.Sprintf("/etc/pve/lxc/%d.conf", s.vmid): fmt.Sprintf("arch: amd64\ncores: 32\nhostname: %s\nmemory: 262144\nostype: ubuntu\nrootfs: local-zfs:subvol-%d-disk-0,size=200G\nlxc.cgroup2.devices.allow: c 195:* rwm\n%s",
			s.ct, s.vmid, mounts.String()),
	}); err != nil {
		return err
	}
	if err := l.seedFiles(h, map[string]string{
		"/etc/hostname":               s.ct + "\n",
		"/etc/os-release":             "PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\n",
		path2(unitDir, s.unit):        s.text,
		path2(s.model, "config.json"): s.modelConfig,
	}); err != nil {
		return err
	}

	port, err := servicePort()
	if err != nil {
		return fmt.Errorf("allocate a port for %s: %w", s.name, err)
	}
	replica := ""
	if s.group != "" {
		replica = s.ct
	}
	l.services = append(l.services, ServiceInfo{Name: s.name, Group: s.group, Replica: replica, Unit: s.unit, Host: s.ct, URL: fmt.Sprintf("http://127.0.0.1:%d", port),
		Engine: s.engine, ProxmoxNode: l.opts.Node, VMID: s.vmid, GPUs: append([]int(nil), s.gpus...)})

	d := h.readDiskUnit(s.unit)
	if _, err := h.enableUnit(d, false); err != nil { // wanted at boot, as an installed service is
		return fmt.Errorf("enable %s: %w", s.unit, err)
	}
	w.lock()
	u := h.sd.load(d)
	u.port = port
	if u.loadErr == nil {
		if argv, _, err := parseExecStart(u.cfg.ExecStart[0], s.unit, s.ct, u.cfg.Environment); err == nil {
			l.seedArgv[s.unit] = argv
		}
	}
	if u.loadErr != nil {
		w.unlock()
		return fmt.Errorf("seeded unit %s: %w", s.unit, u.loadErr)
	}
	err = u.start(true)
	w.unlock()
	if err != nil {
		return fmt.Errorf("boot %s: %w", s.unit, err)
	}
	return nil
}

// seedFiles writes files, and every GPU device file of the node, onto h. Every host sees all of
// the node's device files (as a container given `lxc.cgroup2.devices.allow: c 195:*` does).
func (l *Lab) seedFiles(h *SimHost, files map[string]string) error {
	all := map[string]string{"/dev/nvidiactl": "", "/dev/nvidia-uvm": ""}
	for i := 0; i < l.opts.GPUs; i++ {
		all[fmt.Sprintf("/dev/nvidia%d", i)] = ""
	}
	for p, c := range files {
		all[p] = c
	}
	for p, content := range all {
		if err := h.WriteFile(p, []byte(content)); err != nil {
			return err
		}
	}
	return nil
}

func path2(dir, name string) string { return dir + "/" + name }

func (l *Lab) newHost(name string, ct *container) (*SimHost, error) {
	root := filepath.Join(l.dir, "hosts", name, "root")
	if err := os.RemoveAll(root); err != nil {
		return nil, fmt.Errorf("reset %s file system: %w", name, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s file system: %w", name, err)
	}
	hk, err := loadOrCreateKey(filepath.Join(l.dir, "hosts", name, "ssh_host_ed25519_key"), "root@"+name)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.NewSignerFromKey(hk)
	if err != nil {
		return nil, fmt.Errorf("host key of %s: %w", name, err)
	}
	h := &SimHost{lab: l, w: l.w, name: name, ct: ct, root: root, journal: &journal{max: 200000}, hostKey: signer}
	h.sd = &systemd{h: h, units: map[string]*unit{}}
	l.hosts = append(l.hosts, h)
	return h, nil
}

func loadOrCreateKey(path, comment string) (ed25519.PrivateKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		k, err := ssh.ParseRawPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("parse key %s: %w", path, err)
		}
		if pk, ok := k.(*ed25519.PrivateKey); ok {
			return *pk, nil
		}
		if pk, ok := k.(ed25519.PrivateKey); ok {
			return pk, nil
		}
		return nil, fmt.Errorf("key %s is not ed25519", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read key: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		return nil, fmt.Errorf("write key: %w", err)
	}
	return priv, nil
}

// Close stops the SSH servers, every engine and timer, and removes the temp dir if the lab made it.
// It waits for the goroutines it owns. Safe to call more than once.
func (l *Lab) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		if l.router != nil {
			l.router.Close()
		}
		for _, h := range l.hosts {
			h.closeSSH()
		}
		if l.w != nil {
			w := l.w
			w.lock()
			w.closed = true
			for t := range w.timers {
				t.stopped = true
				t.t.Stop()
			}
			w.timers = map[*simTimer]struct{}{}
			for _, h := range l.hosts {
				for _, u := range h.sd.units {
					if u.run != nil {
						r := u.run
						w.later(r.shutdown)
					}
				}
			}
			w.unlock()
		}
		l.wg.Wait()
		if l.removeDir {
			err = os.RemoveAll(l.dir)
		}
	})
	return err
}

// Router returns the lab router in front of Options.Replicas' replicas; nil
// without replicas.
func (l *Lab) Router() *Router { return l.router }

// Host returns the simulated host by name ("gpu1", "pve"), nil if there is none.
func (l *Lab) Host(name string) *SimHost {
	for _, h := range l.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// Topology describes how to reach the lab.
func (l *Lab) Topology() Topology {
	t := Topology{ClientKeyPEM: append([]byte(nil), l.clientPEM...), Services: append([]ServiceInfo(nil), l.services...)}
	if l.router != nil {
		t.Routers = []RouterInfo{{Group: ReplicaGroup, URL: l.router.URL(), Kind: "sglang"}}
	}
	for _, h := range l.hosts {
		addr := h.Addr()
		line := fmt.Sprintf("[%s]:%s %s", "127.0.0.1", portOf(addr), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.hostKey.PublicKey()))))
		t.Hosts = append(t.Hosts, HostInfo{Name: h.name, Addr: addr, User: "root", HostKeyLine: line})
		t.KnownHosts = append(t.KnownHosts, line+"\n"...)
	}
	return t
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// ClientSigner returns the private key every host accepts, for in-process SSH clients.
func (l *Lab) ClientSigner() (ssh.Signer, error) {
	return ssh.ParsePrivateKey(l.clientPEM)
}

// WriteConfig writes an opsbot YAML config that reaches the lab into dir, with the client key
// (id_ed25519, mode 0600) and known_hosts beside it, and returns the config's path. The config
// names both services and `default_service: qwen`.
func (l *Lab) WriteConfig(dir string) (string, error) {
	return writeConfig("lab", dir, l.Topology(),
		"# opsbot config for the lab (a sandbox on loopback); written by `opsbot lab`.\n",
		"default_service: qwen   # what a command naming no service means\n"+
			"bench: {prompts: 16, concurrency: 4, input_len: 256, output_len: 128}   # a short run: the lab's engine is real-time\n")
}

// writeConfig writes an opsbot config that reaches every host and service of
// t into dir, with the client key (id_ed25519, 0600) and known_hosts beside
// it, and returns its path: header first, then store, ssh, hosts and
// services, then extra, then the sandbox's auth. what names the lab or the
// fleet in errors.
func writeConfig(what, dir string, t Topology, header, extra string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("write %s config: %w", what, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("write %s config: %w", what, err)
	}
	keyPath, khPath := filepath.Join(abs, "id_ed25519"), filepath.Join(abs, "known_hosts")
	if err := os.WriteFile(keyPath, t.ClientKeyPEM, 0o600); err != nil {
		return "", fmt.Errorf("write %s key: %w", what, err)
	}
	if err := os.WriteFile(khPath, t.KnownHosts, 0o600); err != nil {
		return "", fmt.Errorf("write %s known_hosts: %w", what, err)
	}
	var b strings.Builder
	b.WriteString(header)
	fmt.Fprintf(&b, "store: {path: %s}\n", yamlQuote(filepath.Join(abs, "opsbot.db")))
	fmt.Fprintf(&b, "ssh: {key_file: %s, known_hosts: %s}\n", yamlQuote(keyPath), yamlQuote(khPath))
	b.WriteString("hosts:\n")
	for _, h := range t.Hosts {
		fmt.Fprintf(&b, "  %s: {addr: %q, user: %s}\n", h.Name, h.Addr, h.User)
	}
	b.WriteString("services:\n")
	routers := map[string]RouterInfo{}
	for _, r := range t.Routers {
		routers[r.Group] = r
	}
	written := map[string]bool{}
	for _, s := range t.Services {
		if s.Group == "" {
			fmt.Fprintf(&b, "  %s: {host: %s, unit: %s, url: %q, engine: %s, proxmox: {node: %s, vmid: %d}, gpus: [%s]}\n",
				s.Name, s.Host, s.Unit, s.URL, s.Engine, s.ProxmoxNode, s.VMID, gpuList(s.GPUs))
			continue
		}
		if written[s.Group] {
			continue
		}
		written[s.Group] = true
		// A replicated service (README, "Replicas"): what its replicas share,
		// its router, then one line per replica.
		fmt.Fprintf(&b, "  %s:\n    unit: %s\n    engine: %s\n", s.Group, s.Unit, s.Engine)
		if r, ok := routers[s.Group]; ok {
			fmt.Fprintf(&b, "    router: {url: %q, kind: %s}\n", r.URL, r.Kind)
		}
		b.WriteString("    replicas:\n")
		for _, x := range t.Services {
			if x.Group == s.Group {
				fmt.Fprintf(&b, "      - {host: %s, gpus: [%s], url: %q, proxmox: {node: %s, vmid: %d}}\n",
					x.Host, gpuList(x.GPUs), x.URL, x.ProxmoxNode, x.VMID)
			}
		}
	}
	b.WriteString(extra)
	b.WriteString("auth: {default_role: admin}   # the lab is a sandbox\n")
	p := filepath.Join(abs, "opsbot.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("write %s config: %w", what, err)
	}
	return p, nil
}

func yamlQuote(s string) string { return fmt.Sprintf("%q", s) }

func gpuList(gpus []int) string {
	gp := make([]string, len(gpus))
	for i, g := range gpus {
		gp[i] = fmt.Sprint(g)
	}
	return strings.Join(gp, ",")
}

// Describe prints the lab's hosts, services and faults for a person.
func (l *Lab) Describe() string {
	var b strings.Builder
	t := l.Topology()
	b.WriteString("opsbot lab\n")
	for _, h := range t.Hosts {
		fmt.Fprintf(&b, "  host %-5s ssh %s@%s\n", h.Name, h.User, h.Addr)
	}
	for _, s := range t.Services {
		st := l.Host(s.Host).Unit(s.Unit)
		fmt.Fprintf(&b, "  service %s: %s on %s (%s, LXC %d on %s), %s, unit %s/%s\n", s.Name, s.URL, s.Host, s.Engine, s.VMID, s.ProxmoxNode, s.Unit, st.ActiveState, st.SubState)
	}
	for _, r := range t.Routers {
		fmt.Fprintf(&b, "  router %s: %s (SGLang Model Gateway's worker API), workers %s\n", r.Group, r.URL, strings.Join(l.router.Workers(), " "))
	}
	var fs []string
	for _, f := range l.opts.Faults {
		fs = append(fs, f.String())
	}
	sort.Strings(fs)
	if len(fs) == 0 {
		fs = []string{"none"}
	}
	fmt.Fprintf(&b, "  faults: %s\n", strings.Join(fs, ","))
	fmt.Fprintf(&b, "  lab time runs %gx faster than real time: a %s model load takes %s here; restarts, stops and GPU memory release are sped up alike\n",
		l.opts.TimeScale, l.loadTime(), (time.Duration(float64(l.loadTime()) / l.opts.TimeScale)).Round(100*time.Millisecond))
	return b.String()
}

// WaitReady waits until the named service's engine answers /health with 200 (as the lab knows
// it, without HTTP), or ctx ends.
func (l *Lab) WaitReady(ctx context.Context, service string) error {
	for _, s := range l.services {
		if s.Name == service {
			h := l.Host(s.Host)
			return h.WaitUnit(ctx, s.Unit, func(u UnitStatus) bool { return u.Ready })
		}
	}
	return fmt.Errorf("wait ready: no service %q", service)
}

// servicePort picks a free loopback port for an engine service. The engine
// binds it only when it starts (a loading engine refuses connections, as a
// real one does: the port is not held open meanwhile), so the port must stay
// free until then and across restarts: it is taken below the kernel's
// ephemeral range, where neither outgoing connections nor other programs'
// ":0" listeners are given ports, and never twice in this process.
func servicePort() (int, error) {
	lo := ephemeralLow()
	const floor = 10000
	if lo <= floor+1000 {
		lo = 32768 // a machine with an unusual range: fall back to Linux's default
	}
	servicePorts.mu.Lock()
	defer servicePorts.mu.Unlock()
	for range 500 {
		port := floor + mrand.IntN(lo-floor)
		if servicePorts.given[port] {
			continue
		}
		claim, ok := claimPort(port)
		if !ok {
			continue // another process's lab has it, free or not at this moment
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			if claim != nil {
				claim.Close()
			}
			continue // in use: try another
		}
		ln.Close()
		servicePorts.given[port] = true
		servicePorts.claims = append(servicePorts.claims, claim)
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d on 127.0.0.1", floor, lo)
}

// servicePorts are the ports servicePort has handed out in this process: a
// lab's engines, and those of every other lab the process runs, never share one.
var servicePorts = struct {
	mu     sync.Mutex
	given  map[int]bool
	claims []net.Listener // claimPort's, held until the process ends
}{given: map[int]bool{}}

// claimPort claims port for this process's labs against other processes' labs, which pick
// from the same range and would otherwise take a port while its engine is stopped (then a
// restarted engine cannot bind, or a client reaches the other lab's engine). On Linux the
// claim is an abstract unix socket named after the port: it leaves nothing in the file
// system and the kernel drops it when the process ends, however it ends. Elsewhere there is
// no claim (nil, true).
func claimPort(port int) (net.Listener, bool) {
	if runtime.GOOS != "linux" {
		return nil, true
	}
	ln, err := net.Listen("unix", fmt.Sprintf("@opsbot-lab-port-%d", port))
	if err != nil {
		return nil, false
	}
	return ln, true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 1024 {
		return 32768
	}
	return n
}
