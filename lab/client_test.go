package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testClient is a minimal SSH client for the lab's own tests (the real one lives in ops/remote).
type testClient struct {
	c *ssh.Client
}

func shQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// Run implements sshsuite.Runner.
func (tc *testClient) Run(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
	s, err := tc.c.NewSession()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("new session: %w", err)
	}
	defer s.Close()
	var o, e bytes.Buffer
	s.Stdout, s.Stderr = &o, &e
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	if err := s.Start(shQuote(argv)); err != nil {
		return nil, nil, 0, fmt.Errorf("start %q: %w", argv, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Signal(ssh.SIGKILL)
		s.Close()
		<-done
		return o.Bytes(), e.Bytes(), -1, fmt.Errorf("run %q: %w", argv, ctx.Err())
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return o.Bytes(), e.Bytes(), ee.ExitStatus(), nil
	}
	if err != nil {
		return o.Bytes(), e.Bytes(), -1, fmt.Errorf("run %q: %w", argv, err)
	}
	return o.Bytes(), e.Bytes(), 0, nil
}

func (tc *testClient) must(t testing.TB, argv ...string) string {
	t.Helper()
	out, errb, code, err := tc.Run(context.Background(), nil, argv...)
	if err != nil || code != 0 {
		t.Fatalf("%v: exit %d err %v stderr %q", argv, code, err, errb)
	}
	return string(out)
}

func (tc *testClient) run(t testing.TB, argv ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errb, code, err := tc.Run(ctx, nil, argv...)
	if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	return string(out), string(errb), code
}

// fastOpts makes every lab time 1000x faster than simulated.
func fastOpts() Options { return Options{TimeScale: 1000} }

func startLab(t testing.TB, opts Options) *Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return l
}

func clientConfig(t testing.TB, l *Lab) *ssh.ClientConfig {
	t.Helper()
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, l.Topology().KnownHosts, 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := l.ClientSigner()
	if err != nil {
		t.Fatal(err)
	}
	return &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: cb,
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519}, Timeout: 5 * time.Second}
}

func dialHost(t testing.TB, l *Lab, host string) *testClient {
	t.Helper()
	c, err := ssh.Dial("tcp", l.Host(host).Addr(), clientConfig(t, l))
	if err != nil {
		t.Fatalf("dial %s: %v", host, err)
	}
	t.Cleanup(func() { c.Close() })
	return &testClient{c: c}
}

var _ = net.Dial
