// Package sshdtest runs OpenSSH's sshd on 127.0.0.1 for tests: its own config, host key and
// authorized keys in a temporary directory, a free port, and a login user with /bin/sh. As root
// it logs in a dedicated user (opsbot-test, created when missing); otherwise the current user.
// Tests skip when /usr/sbin/sshd is missing, unless OPSBOT_REQUIRE_SSHD=1 makes that a failure.
//
// The one known exception to "tests leave the machine as they found it": as root, what sshd
// needs on the machine stays there after the tests, the privilege separation directory
// /run/sshd (made when missing, as Debian's ssh.service makes it) and the user opsbot-test
// (an account with no password, a locked "*" hash, reachable only with a test's key while a
// test's sshd runs). Both are made once and reused; nothing else of the machine is changed.
package sshdtest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHD is the sshd binary used.
const SSHD = "/usr/sbin/sshd"

// TestUser is the login user when the tests run as root.
const TestUser = "opsbot-test"

// Server is a running sshd. Its fields are read-only.
type Server struct {
	Addr           string     // 127.0.0.1:PORT
	Host, Port     string     // Addr's parts
	User           string     // login user (shell /bin/sh when created here)
	Home           string     // the user's home directory
	Dir            string     // config, keys and pid file
	HostKey        ssh.Signer // the server's ed25519 host key
	ECDSAHostKey   ssh.Signer // with Options.ECDSAHostKey: its ecdsa-sha2-nistp256 host key
	KnownHostsLine string     // known_hosts line for Addr
	KnownHostsFile string     // a known_hosts file holding only KnownHostsLine
	ClientSigner   ssh.Signer // client key accepted for User
	ClientKeyPEM   []byte     // ClientSigner's private key, OpenSSH PEM

	cmd        *exec.Cmd
	exited     chan struct{}
	forwarding string // AllowTcpForwarding
	logLevel   string // LogLevel
	log        *SyncBuffer
}

// Options change the server Start makes.
type Options struct {
	// ECDSAHostKey makes the server offer an ecdsa-sha2-nistp256 host key besides the ed25519
	// one (KnownHostsLine still lists only the ed25519 key): a client that does not restrict its
	// host key algorithms to the known ones sees the ECDSA key.
	ECDSAHostKey bool
	// NoTCPForwarding sets AllowTcpForwarding no: the server refuses direct-tcpip channels
	// (administratively prohibited).
	NoTCPForwarding bool
	// DebugLog sets LogLevel DEBUG1 (else VERBOSE): the log then names the target of every
	// direct-tcpip channel a client asks for, which ForwardTargets lists.
	DebugLog bool
}

// Start starts sshd and waits until it accepts SSH connections; it stops on t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		if os.Getenv("OPSBOT_REQUIRE_SSHD") == "1" {
			t.Fatalf("sshdtest: %s is required (OPSBOT_REQUIRE_SSHD=1): %v", SSHD, err)
		}
		t.Skipf("sshdtest: %s not installed", SSHD)
	}
	s, err := start(t, opts)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	return s
}

func start(t testing.TB, opts Options) (*Server, error) {
	u, err := loginUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "opsbot-sshd-")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// sshd reads the authorized keys as the login user.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
	}
	s := &Server{User: u.Username, Home: u.HomeDir, Dir: dir, forwarding: "yes", logLevel: "VERBOSE"}
	if opts.NoTCPForwarding {
		s.forwarding = "no"
	}
	if opts.DebugLog {
		s.logLevel = "DEBUG1"
	}
	if s.HostKey, _, err = NewKey(filepath.Join(dir, "host_ed25519"), 0o600, false); err != nil {
		return nil, err
	}
	hostKeys := "HostKey " + filepath.Join(dir, "host_ed25519") + "\n"
	if opts.ECDSAHostKey {
		if s.ECDSAHostKey, _, err = NewKey(filepath.Join(dir, "host_ecdsa"), 0o600, true); err != nil {
			return nil, err
		}
		hostKeys = "HostKey " + filepath.Join(dir, "host_ecdsa") + "\n" + hostKeys
	}
	if s.ClientSigner, s.ClientKeyPEM, err = NewKey(filepath.Join(dir, "client_ed25519"), 0o600, false); err != nil {
		return nil, err
	}
	ak := ssh.MarshalAuthorizedKey(s.ClientSigner.PublicKey())
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), ak, 0o644); err != nil {
		return nil, err
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		if lastErr = s.run(t, port, hostKeys); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// run writes the config for port and starts sshd; an error means it did not come up (the port
// may have been taken in between: the caller tries another).
func (s *Server) run(t testing.TB, port int, hostKeys string) error {
	s.Host, s.Port = "127.0.0.1", strconv.Itoa(port)
	s.Addr = net.JoinHostPort(s.Host, s.Port)
	conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
%[4]sPidFile %[2]s/sshd.pid
AuthorizedKeysFile %[2]s/authorized_keys
AllowUsers %[3]s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
PrintMotd no
AllowTcpForwarding %[5]s
MaxSessions 100
MaxStartups 100
LogLevel %[6]s
Subsystem sftp internal-sftp
`, port, s.Dir, s.User, hostKeys, s.forwarding, s.logLevel)
	cfgPath := filepath.Join(s.Dir, "sshd_config")
	if err := os.WriteFile(cfgPath, []byte(conf), 0o644); err != nil {
		return err
	}
	s.log = &SyncBuffer{}
	cmd := exec.Command(SSHD, "-D", "-e", "-f", cfgPath)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", SSHD, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited on start: %s", SSHD, s.log.String())
		default:
		}
		if Banner(s.Addr) {
			break
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("%s did not accept connections on %s within 10s: %s", SSHD, s.Addr, s.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(s.stop)
	s.KnownHostsLine = fmt.Sprintf("[%s]:%s %s", s.Host, s.Port, bytes.TrimSpace(ssh.MarshalAuthorizedKey(s.HostKey.PublicKey())))
	s.KnownHostsFile = filepath.Join(s.Dir, "known_hosts")
	return os.WriteFile(s.KnownHostsFile, []byte(s.KnownHostsLine+"\n"), 0o644)
}

// Banner reports whether an SSH server answers on addr (its SSH-2.0 banner
// within 2 s).
func Banner(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && len(line) > 8 && line[:8] == "SSH-2.0-"
}

// stop ends sshd and the session processes it started.
func (s *Server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.exited
	}
}

// Log is what sshd wrote so far (-e: its log goes to stderr).
func (s *Server) Log() string { return s.log.String() }

// directTCPIP is sshd's DEBUG1 line for a direct-tcpip channel asked for.
var directTCPIP = regexp.MustCompile(`server_request_direct_tcpip: originator \S+ port \d+, target (\S+) port (\d+)`)

// ForwardTargets lists, in order, the host:port of every direct-tcpip channel clients asked
// this server for so far (opened or not). It needs Options.DebugLog; without it, it is nil.
// Lines reach the log a moment after sshd handles a channel: a test waits for a channel it
// knows of before reading what came before it (one connection's channels are logged in order).
func (s *Server) ForwardTargets() []string {
	var out []string
	for _, m := range directTCPIP.FindAllStringSubmatch(s.Log(), -1) {
		out = append(out, net.JoinHostPort(m[1], m[2]))
	}
	return out
}

// UserDir makes a fresh directory in Dir owned by User, for file tests; removed with Dir.
func (s *Server) UserDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp(s.Dir, "files-")
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup(s.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if os.Geteuid() == 0 {
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func loginUser() (*user.User, error) {
	if os.Geteuid() != 0 {
		return user.Current()
	}
	if _, err := user.Lookup(TestUser); err != nil {
		out, err := exec.Command("useradd", "-m", "-s", "/bin/sh", TestUser).CombinedOutput()
		if _, lerr := user.Lookup(TestUser); err != nil && lerr != nil {
			return nil, fmt.Errorf("create user %s: %v: %s", TestUser, err, out)
		}
	}
	// useradd leaves the account locked ("!"), which sshd refuses even for key logins.
	if out, err := exec.Command("usermod", "-p", "*", TestUser).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("unlock user %s: %v: %s", TestUser, err, out)
	}
	return user.Lookup(TestUser)
}

// FreePort returns a loopback port that was free a moment ago; sshd binds it
// itself, so the test retries on the rare collision.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// NewKey makes an ed25519 (or, with ec, ECDSA P-256) key and writes it to
// path in OpenSSH format with perm.
func NewKey(path string, perm os.FileMode, ec bool) (ssh.Signer, []byte, error) {
	var priv any
	var err error
	if ec {
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	} else {
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		return nil, nil, err
	}
	blk, err := ssh.MarshalPrivateKey(priv, "opsbot-sshdtest")
	if err != nil {
		return nil, nil, err
	}
	pemBytes := pem.EncodeToMemory(blk)
	if err := os.WriteFile(path, pemBytes, perm); err != nil {
		return nil, nil, err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("signer for %s", path), err)
	}
	return signer, pemBytes, nil
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a process's
// stdout and stderr).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
