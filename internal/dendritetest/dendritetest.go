// Package dendritetest runs a real Matrix homeserver, Dendrite v0.13.8, on
// 127.0.0.1 for tests: its own keys, config and SQLite databases in a
// temporary directory, federation off, registration closed except through
// the shared-secret admin endpoint (Register).
//
// Dendrite is not a Go dependency of opsbot (it needs cgo for its SQLite
// driver): its binaries are built once, outside the module, by .ci/run
// (GOFLAGS= CGO_ENABLED=1 go install
// github.com/matrix-org/dendrite/cmd/...@v0.13.8) into a directory named by
// OPSBOT_DENDRITE_DIR, or found on PATH. Tests skip when they are missing,
// unless OPSBOT_REQUIRE_DENDRITE=1 makes that a failure.
package dendritetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"
	"maunium.net/go/mautrix/synapseadmin"

	"github.com/opsbot/opsbot/internal/testrun"
)

// ServerName is the homeserver's name: users are @NAME:localhost.
const ServerName = "localhost"

// Server is a running Dendrite. Its fields are read-only.
type Server struct {
	URL    string // http://127.0.0.1:PORT
	Dir    string // keys, config, databases and log
	secret string

	cmd    *exec.Cmd
	exited chan struct{}
	log    *syncBuffer
}

// Binaries returns the directory holding dendrite, generate-keys and
// generate-config, or "" when they are not built.
func Binaries() string {
	if d := os.Getenv("OPSBOT_DENDRITE_DIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "dendrite")); err == nil {
			return d
		}
		return ""
	}
	p, err := exec.LookPath("dendrite")
	if err != nil {
		return ""
	}
	return filepath.Dir(p)
}

// Start runs a Dendrite for t, stopped when t ends. It skips t (or fails it,
// with OPSBOT_REQUIRE_DENDRITE=1) when Dendrite is not built.
func Start(t testing.TB) *Server {
	t.Helper()
	testrun.Long(t)
	bin := Binaries()
	if bin == "" {
		msg := "dendrite is not built: GOFLAGS= CGO_ENABLED=1 GOBIN=DIR go install github.com/matrix-org/dendrite/cmd/...@v0.13.8, then OPSBOT_DENDRITE_DIR=DIR"
		if os.Getenv("OPSBOT_REQUIRE_DENDRITE") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	secret := randomHex(16)
	if err := configure(bin, dir, secret); err != nil {
		t.Fatal(err)
	}
	// Dendrite takes an address, not a listener: a port picked free may be
	// taken before it binds, so a start that fails to bind is tried again.
	var lastErr error
	for range 3 {
		s, err := start(bin, dir, secret)
		if err == nil {
			t.Cleanup(s.stop)
			return s
		}
		lastErr = err
	}
	t.Fatal(lastErr)
	return nil
}

// configure writes the server's key and config into dir.
func configure(bin, dir, secret string) error {
	key := filepath.Join(dir, "matrix_key.pem")
	if out, err := exec.Command(filepath.Join(bin, "generate-keys"), "--private-key", key).CombinedOutput(); err != nil {
		return fmt.Errorf("dendrite generate-keys: %w: %s", err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "generate-config"), "-ci", "-dir", dir, "-server", ServerName).Output()
	if err != nil {
		return fmt.Errorf("dendrite generate-config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		return fmt.Errorf("dendrite config: %w", err)
	}
	global := section(cfg, "global")
	global["private_key"] = key
	global["disable_federation"] = true
	// -ci opens registration, and Dendrite then refuses to start without
	// --really-enable-open-registration: close it; the shared-secret
	// endpoint still registers users.
	client := section(cfg, "client_api")
	client["registration_disabled"] = true
	client["registration_shared_secret"] = secret
	// No rate limits: tests send bursts.
	client["rate_limiting"] = map[string]any{"enabled": false}
	// -ci logs at trace level to stdout.
	cfg["logging"] = []any{map[string]any{"type": "std", "level": "info"}}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("dendrite config: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "dendrite.yaml"), b, 0o600)
}

func section(cfg map[string]any, name string) map[string]any {
	m, ok := cfg[name].(map[string]any)
	if !ok {
		m = map[string]any{}
		cfg[name] = m
	}
	return m
}

func start(bin, dir, secret string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Server{URL: "http://" + addr, Dir: dir, secret: secret, exited: make(chan struct{}), log: &syncBuffer{}}
	s.cmd = exec.Command(filepath.Join(bin, "dendrite"), "--config", filepath.Join(dir, "dendrite.yaml"),
		"--http-bind-address", addr)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start dendrite: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(s.URL + "/_matrix/client/versions")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("dendrite exited before serving on %s:\n%s", addr, s.log.tail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("dendrite did not serve on %s within 60s:\n%s", addr, s.log.tail())
		}
	}
}

func (s *Server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Log returns what the server printed so far (the end of it).
func (s *Server) Log() string { return s.log.tail() }

// User is a registered account and a client logged in as it.
type User struct {
	ID       id.UserID
	Password string
	Client   *mautrix.Client
}

// Register creates the account @name:localhost with a random password
// through the shared-secret admin endpoint, and returns a client logged in
// as it.
func (s *Server) Register(t testing.TB, name string) *User {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	anon, err := mautrix.NewClient(s.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	pw := randomHex(12)
	admin := &synapseadmin.Client{Client: anon}
	resp, err := admin.SharedSecretRegister(ctx, s.secret, synapseadmin.ReqSharedSecretRegister{Username: name, Password: pw})
	if err != nil {
		t.Fatalf("register %s on dendrite: %v", name, err)
	}
	cli, err := mautrix.NewClient(s.URL, resp.UserID, resp.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	cli.DeviceID = resp.DeviceID
	return &User{ID: resp.UserID, Password: pw, Client: cli}
}

// Login logs in as u again, from a new device: the same account, keys of
// its own.
func (s *Server) Login(t testing.TB, u *User) *User {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := mautrix.NewClient(s.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Login(ctx, &mautrix.ReqLogin{Type: mautrix.AuthTypePassword,
		Identifier: mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: u.ID.String()}, Password: u.Password, StoreCredentials: true})
	if err != nil {
		t.Fatalf("log in as %s again: %v", u.ID, err)
	}
	cli.DeviceID = resp.DeviceID
	return &User{ID: u.ID, Password: u.Password, Client: cli}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// syncBuffer keeps the last 64 KiB a process wrote.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 1<<16 {
		rest := b.b.Bytes()[b.b.Len()-1<<15:]
		b.b = *bytes.NewBuffer(append([]byte(nil), rest...))
	}
	return b.b.Write(p)
}

func (b *syncBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
