package remote_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/sshdtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
)

// forwardCase is one SSH server that forwards (open: an HTTP server reachable from its side,
// and how to make it refuse forwarding).
type forwardCase struct {
	tg      target
	open    string // host:port, as the server sees it, where an HTTP server answers
	path    string // a path of it that answers 200
	refused func(t *testing.T) (target, func())
}

// TestDialThroughSSH: a Tunnel reaches a loopback HTTP server through the host's SSH
// server on the pooled connection (one handshake for every channel), against the lab and
// OpenSSH alike; a port where nothing listens reads as a refused connection; a server that
// refuses forwarding (AllowTcpForwarding no) gives a *ForwardError that says so and names the
// fix.
func TestDialThroughSSH(t *testing.T) {
	ctx := testkit.Context(t, 30*time.Second)
	l := startLab(t)
	if err := l.WaitReady(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	var qwen string
	for _, s := range l.Topology().Services {
		if s.Name == "qwen" {
			u, err := url.Parse(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			qwen = u.Host
		}
	}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(web.Close)
	cases := []forwardCase{
		{tg: labTarget(t, l), open: qwen, path: "/health", refused: func(t *testing.T) (target, func()) {
			l.RefuseForwarding(true)
			return labTarget(t, l), func() { l.RefuseForwarding(false) }
		}},
		{tg: sshdTarget(t, sshdtest.Start(t)), open: strings.TrimPrefix(web.URL, "http://"), path: "/", refused: func(t *testing.T) (target, func()) {
			return sshdTarget(t, sshdtest.StartWith(t, sshdtest.Options{NoTCPForwarding: true})), func() {}
		}},
	}
	for _, c := range cases {
		t.Run(c.tg.name, func(t *testing.T) {
			p := c.tg.pool(t, nil)
			h := mustHost(t, p, c.tg.host)
			hc := &http.Client{Transport: &http.Transport{DialContext: tunnel(t, h, c.open).DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
			for i := 0; i < 3; i++ {
				resp, err := hc.Get("http://" + c.open + c.path)
				if err != nil {
					t.Fatalf("GET through %s: %v", c.tg.name, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET through %s: HTTP %d", c.tg.name, resp.StatusCode)
				}
			}
			if n := p.Dials(); n != 1 {
				t.Errorf("three forwarded requests made %d SSH connections, want 1 (the pooled one)", n)
			}

			_, err := tunnel(t, h, "127.0.0.1:1").DialContext(ctx, "tcp", "127.0.0.1:1")
			var fe *remote.ForwardError
			if !errors.As(err, &fe) || fe.Prohibited() || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("dial a closed port through %s: %v (%T), want a *ForwardError that is ECONNREFUSED", c.tg.name, err, err)
			}

			rt, undo := c.refused(t)
			defer undo()
			rh := mustHost(t, rt.pool(t, nil), rt.host)
			_, err = tunnel(t, rh, c.open).DialContext(ctx, "tcp", c.open)
			if !errors.As(err, &fe) || !fe.Prohibited() || errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial through %s refusing forwarding: %v (%T), want a prohibited *ForwardError", c.tg.name, err, err)
			}
			for _, want := range []string{"the SSH server on " + rt.host + " refused to forward to " + c.open,
				"administratively prohibited", "set AllowTcpForwarding yes (or local) in its sshd_config", "or drop via_ssh"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestLabForwardsOnlyToItself: the lab's SSH server connects only to its own host's engines; any
// other address is refused without the lab connecting anywhere, and bad networks or ports are
// refused before a channel is asked for.
func TestLabForwardsOnlyToItself(t *testing.T) {
	ctx := testkit.Context(t, 30*time.Second)
	l := startLab(t)
	tg := labTarget(t, l)
	h := mustHost(t, tg.pool(t, nil), "gpu1")
	_, err := tunnel(t, h, "192.0.2.1:80").DialContext(ctx, "tcp", "192.0.2.1:80")
	var fe *remote.ForwardError
	if !errors.As(err, &fe) || fe.Prohibited() || !strings.Contains(err.Error(), "forwards only to its own loopback") {
		t.Errorf("dial outside the lab: %v", err)
	}
	if _, err := tunnel(t, h, "127.0.0.1:30000").DialContext(ctx, "udp", "127.0.0.1:30000"); err == nil || errors.As(err, &fe) {
		t.Errorf("dial udp: %v, want an error of the request itself", err)
	}
	for _, bad := range []string{"127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000"} {
		if tn, err := h.Tunnel(bad); err == nil {
			t.Errorf("tunnel to %s: %v, want an error of the request itself", bad, tn.Target())
		}
	}
	if n := l.Host("gpu1").Forwarded(); n != 0 {
		t.Errorf("gpu1 forwarded %d channels, want 0", n)
	}
}

// tunnel is h's tunnel to target.
func tunnel(t *testing.T, h *remote.Host, target string) *remote.Tunnel {
	t.Helper()
	tn, err := h.Tunnel(target)
	if err != nil {
		t.Fatalf("tunnel to %s: %v", target, err)
	}
	return tn
}
