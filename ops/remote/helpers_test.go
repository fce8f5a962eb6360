package remote_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/lab/sshsuite"
	"github.com/opsbot/opsbot/ops/remote"
)

// target is one SSH server the tests run against, with a way to make pools for it.
type target struct {
	name       string
	hosts      map[string]remote.HostConfig
	signer     ssh.Signer
	knownHosts []byte
	hostKeys   map[string]ssh.PublicKey // by host name
	fileDir    string                   // a directory the login user may write (sftp tests)
	host       string                   // the host the generic tests use
}

func startLab(t testing.TB) *lab.Lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := lab.Start(ctx, lab.Options{})
	if err != nil {
		t.Fatalf("start lab: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func labTarget(t testing.TB, l *lab.Lab) target {
	t.Helper()
	top := l.Topology()
	signer, err := ssh.ParsePrivateKey(top.ClientKeyPEM)
	if err != nil {
		t.Fatalf("parse lab client key: %v", err)
	}
	tg := target{name: "lab", hosts: map[string]remote.HostConfig{}, signer: signer, knownHosts: top.KnownHosts,
		hostKeys: map[string]ssh.PublicKey{}, fileDir: "/etc", host: "gpu1"}
	for _, h := range top.Hosts {
		tg.hosts[h.Name] = remote.HostConfig{Name: h.Name, Addr: h.Addr, User: h.User}
		_, _, key, _, _, err := ssh.ParseKnownHosts([]byte(h.HostKeyLine))
		if err != nil {
			t.Fatalf("parse host key line of %s: %v", h.Name, err)
		}
		tg.hostKeys[h.Name] = key
	}
	return tg
}

func sshdTarget(t testing.TB, s *sshdtest.Server) target {
	t.Helper()
	return target{name: "sshd", signer: s.ClientSigner, knownHosts: []byte(s.KnownHostsLine + "\n"),
		hosts:    map[string]remote.HostConfig{"local": {Name: "local", Addr: s.Addr, User: s.User}},
		hostKeys: map[string]ssh.PublicKey{"local": s.HostKey.PublicKey()}, fileDir: s.UserDir(t), host: "local"}
}

// targets starts the lab and an sshd and returns both.
func targets(t *testing.T) []target {
	t.Helper()
	return []target{labTarget(t, startLab(t)), sshdTarget(t, sshdtest.Start(t))}
}

func writeFile(t testing.TB, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pool makes a pool for tg; edit may change the config first. It is closed on cleanup.
func (tg target) pool(t testing.TB, edit func(*remote.Config)) *remote.Pool {
	t.Helper()
	cfg := remote.Config{Hosts: tg.hosts, Signer: tg.signer, KnownHosts: writeFile(t, tg.knownHosts),
		ConnectTimeout: 5 * time.Second, HandshakeTimeout: 5 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	p, err := remote.NewPool(cfg)
	if err != nil {
		t.Fatalf("new pool for %s: %v", tg.name, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func mustHost(t testing.TB, p *remote.Pool, name string) *remote.Host {
	t.Helper()
	h, err := p.Host(name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// runner adapts *remote.Host to sshsuite.Runner.
type runner struct{ h *remote.Host }

func (r runner) Run(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, int, error) {
	out, err := r.h.Run(ctx, stdin, argv...)
	return out.Stdout, out.Stderr, out.ExitStatus, err
}

var _ sshsuite.Runner = runner{}
