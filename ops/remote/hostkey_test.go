package remote_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
)

func otherKey(t testing.TB) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestHostKeyRefused(t *testing.T) {
	for _, tg := range targets(t) {
		addr := tg.hosts[tg.host].Addr
		fp := ssh.FingerprintSHA256(tg.hostKeys[tg.host])
		stranger := knownhosts.Line([]string{"127.0.0.1:1"}, otherKey(t)) + "\n"
		cases := []struct {
			name    string
			known   string
			changed bool
		}{
			{"unknown", stranger, false},
			{"empty file", "", false},
			{"changed", stranger + knownhosts.Line([]string{addr}, otherKey(t)) + "\n", true},
		}
		for _, c := range cases {
			t.Run(tg.name+"/"+c.name, func(t *testing.T) {
				tg := tg
				tg.knownHosts = []byte(c.known)
				p := tg.pool(t, nil)
				out, err := mustHost(t, p, tg.host).Run(testkit.Context(t, 30*time.Second), nil, "echo", "ran")
				var he *remote.HostKeyError
				if !errors.As(err, &he) {
					t.Fatalf("run with %s host key: out %q err %v, want *HostKeyError", c.name, out.Stdout, err)
				}
				if he.Changed != c.changed || he.Host != tg.host || he.Addr != addr || he.Fingerprint != fp {
					t.Fatalf("HostKeyError %+v, want host %s addr %s fingerprint %s changed %v", he, tg.host, addr, fp, c.changed)
				}
				msg := err.Error()
				for _, want := range []string{tg.host, addr, fp, "ssh-keyscan", map[bool]string{true: "CHANGED", false: "unknown"}[c.changed]} {
					if !strings.Contains(msg, want) {
						t.Errorf("message %q lacks %q", msg, want)
					}
				}
				if c.changed && he.KnownLine != 2 {
					t.Errorf("KnownLine %d, want 2 (the line of the old key)", he.KnownLine)
				}
				if p.Dials() != 0 {
					t.Errorf("Dials %d after a refused host key, want 0", p.Dials())
				}
			})
		}
	}
}

// The known key is honoured whatever form the known_hosts entry takes.
func TestHostKeyAccepted(t *testing.T) {
	for _, tg := range targets(t) {
		addr := tg.hosts[tg.host].Addr
		key := tg.hostKeys[tg.host]
		hashed := knownhosts.HashHostname(knownhosts.Normalize(addr))
		for name, known := range map[string]string{
			"plain":            knownhosts.Line([]string{addr}, key),
			"hashed":           hashed + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))),
			"after other keys": knownhosts.Line([]string{"127.0.0.1:1"}, otherKey(t)) + "\n" + knownhosts.Line([]string{addr}, key),
		} {
			t.Run(fmt.Sprintf("%s/%s", tg.name, name), func(t *testing.T) {
				tg := tg
				tg.knownHosts = []byte(known + "\n")
				out, err := mustHost(t, tg.pool(t, nil), tg.host).Run(testkit.Context(t, 30*time.Second), nil, "echo", "ok")
				if err != nil || string(out.Stdout) != "ok\n" {
					t.Fatalf("run with %s entry: out %q err %v", name, out.Stdout, err)
				}
			})
		}
	}
}

// A server with several host keys shows the one known_hosts lists: the client offers only the
// algorithms of the known keys (else an ed25519-only entry reads as a changed ECDSA key).
func TestHostKeyAlgorithmsFromKnownHosts(t *testing.T) {
	s := sshdtest.StartWith(t, sshdtest.Options{ECDSAHostKey: true})
	for name, key := range map[string]ssh.PublicKey{"ed25519": s.HostKey.PublicKey(), "ecdsa": s.ECDSAHostKey.PublicKey()} {
		t.Run(name, func(t *testing.T) {
			tg := sshdTarget(t, s)
			tg.knownHosts = []byte(knownhosts.Line([]string{s.Addr}, key) + "\n")
			out, err := mustHost(t, tg.pool(t, nil), "local").Run(testkit.Context(t, 30*time.Second), nil, "echo", "ok")
			if err != nil || string(out.Stdout) != "ok\n" {
				t.Fatalf("known %s key only: %q %v", name, out.Stdout, err)
			}
		})
	}
}

// known_hosts is parsed again whenever it changed, so every dial checks the
// file as it is then: after a version kept parsed for many dials, and after
// rewrites of the same size in place, quicker than the file system's clock
// moves on.
func TestKnownHostsChangesSeenAtTheNextDial(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			addr := tg.hosts[tg.host].Addr
			right := knownhosts.Line([]string{addr}, tg.hostKeys[tg.host]) + "\n"
			wrong := knownhosts.Line([]string{addr}, otherKey(t)) + "\n"
			if len(right) != len(wrong) {
				t.Fatalf("the two lines differ in size (%d, %d): the test needs same-size rewrites", len(right), len(wrong))
			}
			path := filepath.Join(t.TempDir(), "known_hosts")
			write := func(text string) {
				if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write(right)
			old := time.Now().Add(-time.Hour) // a version long settled: kept parsed
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
			p := tg.pool(t, func(c *remote.Config) { c.KnownHosts = path })
			h := mustHost(t, p, tg.host)
			dial := func(step string, wantOK bool) {
				t.Helper()
				p.Drop(tg.host)
				out, err := h.Run(testkit.Context(t, 30*time.Second), nil, "echo", "ok")
				var he *remote.HostKeyError
				switch {
				case wantOK && (err != nil || string(out.Stdout) != "ok\n"):
					t.Fatalf("%s: out %q err %v, want the command run", step, out.Stdout, err)
				case !wantOK && (!errors.As(err, &he) || !he.Changed):
					t.Fatalf("%s: out %q err %v, want a changed host key refused", step, out.Stdout, err)
				}
			}
			dial("the settled file", true)
			dial("the settled file again", true)
			write(wrong)
			dial("rewritten with another key", false)
			write(right)
			dial("rewritten back at once, same size", true)
			write(wrong)
			dial("rewritten again at once, same size", false)
		})
	}
}
