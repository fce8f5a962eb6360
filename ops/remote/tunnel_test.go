package remote_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
)

// TestTunnelConnectsOnlyToItsTarget: through OpenSSH's sshd, a Tunnel made for one loopback
// server connects to it, and refuses any other address (another port, another name of the same
// host) itself: sshd's log names the target only, and the other server gets no connection.
func TestTunnelConnectsOnlyToItsTarget(t *testing.T) {
	ctx := testkit.Context(t, 30*time.Second)
	s := sshdtest.StartWith(t, sshdtest.Options{DebugLog: true})
	var hits, otherHits atomic.Int64
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(engine.Close)
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { otherHits.Add(1) }))
	t.Cleanup(other.Close)
	target, otherAddr := strings.TrimPrefix(engine.URL, "http://"), strings.TrimPrefix(other.URL, "http://")
	tg := sshdTarget(t, s)
	p := tg.pool(t, nil)
	tn := tunnel(t, mustHost(t, p, tg.host), target)
	hc := &http.Client{Transport: &http.Transport{DialContext: tn.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	get := func() {
		t.Helper()
		resp, err := hc.Get(engine.URL)
		if err != nil {
			t.Fatalf("GET the target through the tunnel: %v", err)
		}
		resp.Body.Close()
	}
	get()
	_, port, _ := strings.Cut(target, ":")
	for _, addr := range []string{otherAddr, "localhost:" + port, "127.0.0.2:" + port} {
		_, err := tn.DialContext(ctx, "tcp", addr)
		want := fmt.Sprintf("connect to %s through the SSH connection to %s: refused: not the tunnel's target: it connects only to %s", addr, tg.host, target)
		if !errors.Is(err, remote.ErrNotTarget) || err.Error() != want {
			t.Errorf("dial %s through a tunnel to %s: %v, want %q", addr, target, err, want)
		}
	}
	get() // after the refusals: once sshd logged it, it logged whatever came before
	testkit.WaitFor(t, 5*time.Second, "both channels to the target in sshd's log", func() bool { return len(s.ForwardTargets()) >= 2 })
	if got, want := fmt.Sprint(s.ForwardTargets()), fmt.Sprint([]string{target, target}); got != want {
		t.Errorf("sshd was asked for %s, want %s (the target only)", got, want)
	}
	if hits.Load() != 2 || otherHits.Load() != 0 || p.Dials() != 1 {
		t.Errorf("target got %d requests (want 2), the other server %d (want 0); %d SSH connections (want 1)", hits.Load(), otherHits.Load(), p.Dials())
	}
}

// TestTunnelRefusesBeforeConnecting: another address is refused without even connecting to
// the host (which here does not exist), so the refusal cannot depend on the host's SSH server.
func TestTunnelRefusesBeforeConnecting(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	tg := target{name: "none", signer: signer, hosts: map[string]remote.HostConfig{"gpu1": {Name: "gpu1", Addr: "127.0.0.1:1", User: "root"}}}
	p := tg.pool(t, nil)
	tn := tunnel(t, mustHost(t, p, "gpu1"), "127.0.0.1:30000")
	if tn.Target() != "127.0.0.1:30000" {
		t.Errorf("target %q", tn.Target())
	}
	ctx := testkit.Context(t, 10*time.Second)
	for _, addr := range []string{"127.0.0.1:29301", "127.0.0.1:30001", "localhost:30000", "[::1]:30000"} {
		if _, err := tn.DialContext(ctx, "tcp", addr); !errors.Is(err, remote.ErrNotTarget) {
			t.Errorf("dial %s: %v, want ErrNotTarget", addr, err)
		}
	}
	if n := p.Dials(); n != 0 || p.Stats()[0].DialErrors != 0 {
		t.Errorf("refusals connected to the host: %d dials, %+v", n, p.Stats())
	}
}
