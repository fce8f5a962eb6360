package remote_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops/remote"
)

func TestReuseOneConnection(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			p := tg.pool(t, nil)
			h := mustHost(t, p, tg.host)
			// Concurrent first calls share one dial.
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "echo", fmt.Sprint(i))
					if err == nil && string(out.Stdout) != fmt.Sprintf("%d\n", i) {
						err = fmt.Errorf("echo %d: %q", i, out.Stdout)
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			for range 10 {
				if _, err := h.Run(testkit.Context(t, 30*time.Second), nil, "true"); err != nil {
					t.Fatal(err)
				}
			}
			if n := p.Dials(); n != 1 {
				t.Fatalf("30 runs made %d connections, want 1", n)
			}
			p.Drop(tg.host)
			if out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "echo", "again"); err != nil || string(out.Stdout) != "again\n" {
				t.Fatalf("run after Drop: %q %v", out.Stdout, err)
			}
			if n := p.Dials(); n != 2 {
				t.Fatalf("after Drop and a run: %d connections, want 2", n)
			}
		})
	}
}

func TestOutputFields(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			h := mustHost(t, tg.pool(t, nil), tg.host)
			out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "cat", "/opsbot-no-such-file")
			if err != nil || len(out.Stdout) != 0 || !strings.Contains(string(out.Stderr), "No such file") || out.ExitStatus != 1 || out.Signal != "" {
				t.Fatalf("cat of a missing file: %+v err %v, want no stdout, stderr No such file, exit 1", out, err)
			}
		})
	}
}

// Against OpenSSH: a command ended by a signal reports it in Output.
func TestOutputSignal(t *testing.T) {
	tg := sshdTarget(t, sshdtest.Start(t))
	h := mustHost(t, tg.pool(t, nil), "local")
	done := make(chan struct{})
	var out remote.Output
	var err error
	// A duration no other test run uses: pkill must find this test's sleep
	// only, even when other test runs share the machine and its test user.
	secs := fmt.Sprintf("32.%09d", time.Now().UnixNano()%1e9)
	go func() { out, err = h.Run(testkit.Context(t, 30*time.Second), nil, "sleep", secs); close(done) }()
	// The login shell may or may not exec the command: kill both. On a busy machine a signal
	// can land on the shell in the instant it execs sleep, so it is sent again until the
	// command ends.
	testkit.WaitFor(t, 20*time.Second, "sleep "+secs+" to be killed", func() bool {
		select {
		case <-done:
			return true
		default:
		}
		h.Run(testkit.Context(t, 30*time.Second), nil, "pkill", "-TERM", "-u", tg.hosts["local"].User, "-f", "-x", "(sh -c )?sleep "+strings.ReplaceAll(secs, ".", "[.]"))
		select {
		case <-done:
			return true
		case <-time.After(100 * time.Millisecond): // polling: the next pkill after a pause
			return false
		}
	})
	if err != nil || out.ExitStatus != -1 || out.Signal != "TERM" {
		t.Fatalf("sleep killed by SIGTERM: %+v err %v, want exit -1 signal TERM", out, err)
	}
}

func TestPrefix(t *testing.T) {
	tg := labTarget(t, startLab(t))
	pve := tg.hosts["pve"]
	tg.hosts = map[string]remote.HostConfig{"pve": pve,
		"ct129": {Addr: pve.Addr, User: pve.User, Prefix: []string{"pct", "exec", "129", "--"}}}
	p := tg.pool(t, nil)
	out, err := mustHost(t, p, "ct129").Run(testkit.Context(t, 30*time.Second), nil, "hostname")
	if err != nil || string(out.Stdout) != "gpu1\n" {
		t.Fatalf("pct exec 129 -- hostname: %q %v, want gpu1", out.Stdout, err)
	}
	out, err = mustHost(t, p, "pve").Run(testkit.Context(t, 30*time.Second), nil, "hostname")
	if err != nil || string(out.Stdout) != "pve\n" {
		t.Fatalf("hostname on pve: %q %v", out.Stdout, err)
	}
	// Files are on the machine the SSH server runs on: no prefix.
	if b, err := mustHost(t, p, "ct129").ReadFile(testkit.Context(t, 30*time.Second), "/etc/hostname"); err != nil || string(b) != "pve\n" {
		t.Fatalf("ReadFile /etc/hostname on ct129: %q %v, want pve's", b, err)
	}
}

// The lab's servers serve only session channels, so the jump host is OpenSSH's sshd, which
// forwards (direct-tcpip) to the lab's gpu1.
func TestJumpHost(t *testing.T) {
	l := labTarget(t, startLab(t))
	s := sshdtest.Start(t)
	jump := sshdTarget(t, s)
	gpu1 := l.hosts["gpu1"]
	gpu1.Jump = "bastion"
	tg := target{name: "jump", signer: l.signer, knownHosts: append(append([]byte{}, l.knownHosts...), jump.knownHosts...),
		hosts: map[string]remote.HostConfig{"gpu1": gpu1, "bastion": {Addr: s.Addr, User: s.User}}}
	// One client key for both: sshd accepts the lab's key too.
	addAuthorizedKey(t, s, l.signer.PublicKey())
	p := tg.pool(t, nil)
	h := mustHost(t, p, "gpu1")
	out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "hostname")
	if err != nil || string(out.Stdout) != "gpu1\n" {
		t.Fatalf("hostname on gpu1 through bastion: %q %v", out.Stdout, err)
	}
	if n := p.Dials(); n != 2 {
		t.Fatalf("dials %d, want 2 (bastion, then gpu1 through it)", n)
	}
	// Losing the jump connection loses the tunnelled one; the next run dials both again.
	p.Drop("bastion")
	testkit.WaitFor(t, 10*time.Second, "gpu1 runs again through a new bastion connection", func() bool {
		out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "hostname")
		return err == nil && string(out.Stdout) == "gpu1\n"
	})
	if n := p.Dials(); n != 4 {
		t.Fatalf("dials %d after dropping the bastion, want 4", n)
	}
}

// A connection that goes silent is found by the keep-alives and closed; the next run dials
// again instead of hanging.
func TestKeepAliveClosesSilentConnection(t *testing.T) {
	s := sshdtest.Start(t)
	tg := sshdTarget(t, s)
	px := startProxy(t, s.Addr)
	tg.hosts = map[string]remote.HostConfig{"local": {Addr: px.Addr(), User: s.User}}
	tg.knownHosts = []byte(knownhosts.Line([]string{px.Addr()}, s.HostKey.PublicKey()) + "\n")
	p := tg.pool(t, func(c *remote.Config) { c.KeepAlive = 100 * time.Millisecond })
	h := mustHost(t, p, "local")
	if _, err := h.Run(testkit.Context(t, 30*time.Second), nil, "true"); err != nil {
		t.Fatal(err)
	}
	px.freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	out, err := h.Run(ctx, nil, "echo", "back")
	if err != nil || string(out.Stdout) != "back\n" {
		t.Fatalf("run on a silent connection: %q %v (after %v), want a redial and success", out.Stdout, err, time.Since(start))
	}
	if n := p.Dials(); n != 2 {
		t.Fatalf("dials %d, want 2", n)
	}
}

// A connection cut before a run is dialled again and the run succeeds.
func TestRedialAfterCut(t *testing.T) {
	s := sshdtest.Start(t)
	tg := sshdTarget(t, s)
	px := startProxy(t, s.Addr)
	tg.hosts = map[string]remote.HostConfig{"local": {Addr: px.Addr(), User: s.User}}
	tg.knownHosts = []byte(knownhosts.Line([]string{px.Addr()}, s.HostKey.PublicKey()) + "\n")
	p := tg.pool(t, func(c *remote.Config) { c.KeepAlive = -1 })
	h := mustHost(t, p, "local")
	for i := range 3 {
		if _, err := h.Run(testkit.Context(t, 30*time.Second), nil, "true"); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		px.cut()
	}
	if n := p.Dials(); n != 3 {
		t.Fatalf("dials %d, want 3", n)
	}
}

// A connection lost while the command runs: the outcome is unknown and the command is not sent
// again.
func TestBrokenMidCommand(t *testing.T) {
	s := sshdtest.Start(t)
	tg := sshdTarget(t, s)
	px := startProxy(t, s.Addr)
	tg.hosts = map[string]remote.HostConfig{"local": {Addr: px.Addr(), User: s.User}}
	tg.knownHosts = []byte(knownhosts.Line([]string{px.Addr()}, s.HostKey.PublicKey()) + "\n")
	p := tg.pool(t, nil)
	h := mustHost(t, p, "local")
	mark := filepath.Join(tg.fileDir, "ran")
	done := make(chan error, 1)
	go func() {
		_, err := h.Run(testkit.Context(t, 30*time.Second), nil, "sh", "-c", "echo once >> "+mark+"; exec sleep 30.75")
		done <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the command to start", func() bool { _, err := os.Stat(mark); return err == nil })
	px.cut()
	t.Cleanup(func() { // sshd leaves the orphaned command running
		mustHost(t, p, "local").Run(context.Background(), nil, "pkill", "-KILL", "-f", "-x", "(sh -c )?sleep 30.75")
	})
	select {
	case err := <-done:
		if !errors.Is(err, remote.ErrOutcomeUnknown) || errors.Is(err, context.Canceled) {
			t.Fatalf("run broken mid-command: %v, want ErrOutcomeUnknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its connection was cut")
	}
	if out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "cat", mark); err != nil || string(out.Stdout) != "once\n" {
		t.Fatalf("marker after the cut: %q %v, want the command run exactly once", out.Stdout, err)
	}
}

// The lab's ssh-drop fault drops the connection after systemctl stop took effect.
func TestBrokenMidCommandLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := lab.Start(ctx, lab.Options{Faults: []lab.Fault{{Name: "ssh-drop"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := mustHost(t, labTarget(t, l).pool(t, nil), "gpu1")
	_, err = h.Run(testkit.Context(t, 30*time.Second), nil, "systemctl", "stop", "sglang-qwen.service")
	if !errors.Is(err, remote.ErrOutcomeUnknown) {
		t.Fatalf("systemctl stop with ssh-drop: %v, want ErrOutcomeUnknown", err)
	}
	out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "systemctl", "is-active", "sglang-qwen.service")
	if err != nil || strings.TrimSpace(string(out.Stdout)) != "inactive" {
		t.Fatalf("is-active after the drop: %q %v, want inactive on a new connection", out.Stdout, err)
	}
}

// Cancelling a run really stops the remote command.
func TestCancelKillsRemoteCommand(t *testing.T) {
	tg := sshdTarget(t, sshdtest.Start(t))
	h := mustHost(t, tg.pool(t, nil), "local")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := h.Run(ctx, nil, "sleep", "31.25"); done <- err }()
	running := func() bool {
		out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "pgrep", "-u", tg.hosts["local"].User, "-f", "-x", "sleep 31.25")
		if err != nil {
			t.Fatal(err)
		}
		return out.ExitStatus == 0
	}
	testkit.WaitFor(t, 10*time.Second, "sleep 31.25 to run", running)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v, want context.Canceled", err)
	}
	testkit.WaitFor(t, 2*time.Second, "sleep 31.25 to be gone", func() bool { return !running() })
}

func TestHandshakeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	tg := sshdTarget(t, sshdtest.Start(t))
	tg.hosts = map[string]remote.HostConfig{"mute": {Addr: ln.Addr().String(), User: "x"}}
	p := tg.pool(t, func(c *remote.Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	start := time.Now()
	_, err = mustHost(t, p, "mute").Run(testkit.Context(t, 30*time.Second), nil, "true")
	if d := time.Since(start); err == nil || d > 2*time.Second || !strings.Contains(err.Error(), "handshake") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("run on a mute server: err %v after %v, want a handshake timeout within 2s", err, d)
	}
	// ctx ending first ends the handshake too, with ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	p2 := tg.pool(t, nil)
	if _, err := mustHost(t, p2, "mute").Run(ctx, nil, "true"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled handshake: %v, want context.Canceled", err)
	}
}

func TestConnectRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tg := sshdTarget(t, sshdtest.Start(t))
	tg.hosts = map[string]remote.HostConfig{"gone": {Addr: addr, User: "x"}}
	_, err = mustHost(t, tg.pool(t, nil), "gone").Run(testkit.Context(t, 30*time.Second), nil, "true")
	if err == nil || !strings.Contains(err.Error(), "connect to gone ("+addr+")") {
		t.Fatalf("run on a closed port: %v, want a connect error naming host and address", err)
	}
}

func TestNewPoolValidates(t *testing.T) {
	tg := sshdTarget(t, sshdtest.Start(t))
	kh := writeFile(t, tg.knownHosts)
	ok := remote.HostConfig{Addr: "127.0.0.1:22", User: "root"}
	cases := map[string]struct {
		cfg  remote.Config
		want string
	}{
		"no signer":      {remote.Config{Hosts: map[string]remote.HostConfig{"a": ok}, KnownHosts: kh}, "client key"},
		"no known_hosts": {remote.Config{Hosts: map[string]remote.HostConfig{"a": ok}, Signer: tg.signer}, "known_hosts"},
		"missing file":   {remote.Config{Hosts: map[string]remote.HostConfig{"a": ok}, Signer: tg.signer, KnownHosts: kh + ".nope"}, "known_hosts"},
		"no hosts":       {remote.Config{Signer: tg.signer, KnownHosts: kh}, "no hosts"},
		"bad addr":       {remote.Config{Hosts: map[string]remote.HostConfig{"a": {Addr: "nohost", User: "u"}}, Signer: tg.signer, KnownHosts: kh}, "host:port"},
		"no user":        {remote.Config{Hosts: map[string]remote.HostConfig{"a": {Addr: "h:22"}}, Signer: tg.signer, KnownHosts: kh}, "no user"},
		"name mismatch":  {remote.Config{Hosts: map[string]remote.HostConfig{"a": {Name: "b", Addr: "h:22", User: "u"}}, Signer: tg.signer, KnownHosts: kh}, "under key"},
		"unknown jump":   {remote.Config{Hosts: map[string]remote.HostConfig{"a": {Addr: "h:22", User: "u", Jump: "zz"}}, Signer: tg.signer, KnownHosts: kh}, `jump host "zz"`},
		"jump loop":      {remote.Config{Hosts: map[string]remote.HostConfig{"a": {Addr: "h:22", User: "u", Jump: "b"}, "b": {Addr: "h:22", User: "u", Jump: "a"}}, Signer: tg.signer, KnownHosts: kh}, "loop"},
		"jump to itself": {remote.Config{Hosts: map[string]remote.HostConfig{"a": {Addr: "h:22", User: "u", Jump: "a"}}, Signer: tg.signer, KnownHosts: kh}, "loop"},
	}
	for name, c := range cases {
		if _, err := remote.NewPool(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", name, err, c.want)
		}
	}
	p := tg.pool(t, nil)
	if _, err := p.Host("nope"); err == nil || !strings.Contains(err.Error(), "local") {
		t.Errorf("Host(nope): %v, want an error listing the configured hosts", err)
	}
	h := mustHost(t, p, "local")
	if _, err := h.Run(testkit.Context(t, 30*time.Second), nil); err == nil {
		t.Error("Run with no argv: no error")
	}
	if _, err := h.Run(testkit.Context(t, 30*time.Second), nil, "echo", "a\x00b"); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("Run with a NUL byte: %v", err)
	}
	p.Close()
	if _, err := h.Run(testkit.Context(t, 30*time.Second), nil, "true"); !errors.Is(err, remote.ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
}

// addAuthorizedKey lets key log in to s too.
func addAuthorizedKey(t testing.TB, s *sshdtest.Server, key ssh.PublicKey) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(s.Dir, "authorized_keys"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(ssh.MarshalAuthorizedKey(key)); err != nil {
		t.Fatal(err)
	}
}
