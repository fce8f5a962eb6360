package lab

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestForwardToLoopbackEngine: with LoopbackEngines nothing answers on a
// service's URL from the machine running the lab; a direct-tcpip channel to
// that URL's address through the service's host reaches its engine, under
// every name the host has for itself, and only there (the neighbour's host
// has no engine on that port); each opened channel is counted.
func TestForwardToLoopbackEngine(t *testing.T) {
	t.Parallel()
	opts := fastOpts()
	opts.LoopbackEngines = true
	l := readyLab(t, opts)
	var addr string
	for _, s := range l.Topology().Services {
		if s.Name == "qwen" {
			u, err := url.Parse(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			addr = u.Host
		}
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("qwen's engine answers on %s from outside its host", addr)
	}
	_, port, _ := net.SplitHostPort(addr)
	c := dialHost(t, l, "gpu1")
	for _, host := range []string{"127.0.0.1", "localhost", "gpu1"} {
		hc := &http.Client{Transport: &http.Transport{DialContext: c.c.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
		resp, err := hc.Get("http://" + net.JoinHostPort(host, port) + "/health")
		if err != nil {
			t.Fatalf("GET /health through gpu1 as %s: %v", host, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /health through gpu1 as %s: HTTP %d", host, resp.StatusCode)
		}
	}
	if n := l.Host("gpu1").Forwarded(); n != 3 {
		t.Errorf("gpu1 counted %d forwarded channels, want 3", n)
	}
	_, err := dialHost(t, l, "gpu2").c.Dial("tcp", addr)
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.ConnectionFailed || oe.Message != "Connection refused" {
		t.Errorf("gpu2 to qwen's port: %v, want connect failed: Connection refused", err)
	}
}

// TestNoForwardingFault: the no-forwarding fault refuses every direct-tcpip
// channel as sshd with AllowTcpForwarding no does (administratively
// prohibited, "open failed"), while sessions still run.
func TestNoForwardingFault(t *testing.T) {
	t.Parallel()
	fs, err := ParseFaults("no-forwarding")
	if err != nil {
		t.Fatal(err)
	}
	opts := fastOpts()
	opts.Faults = fs
	l := readyLab(t, opts)
	c := dialHost(t, l, "gpu1")
	_, err = c.c.Dial("tcp", "127.0.0.1:30000")
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.Prohibited || oe.Message != "open failed" {
		t.Fatalf("direct-tcpip with no-forwarding: %v, want administratively prohibited (open failed)", err)
	}
	if _, _, code, err := c.Run(t.Context(), nil, "true"); err != nil || code != 0 {
		t.Fatalf("a session with no-forwarding: exit %d, %v", code, err)
	}
	l.RefuseForwarding(false)
	if _, err := c.c.Dial("tcp", "127.0.0.1:1"); !errors.As(err, &oe) || oe.Reason != ssh.ConnectionFailed {
		t.Fatalf("after RefuseForwarding(false): %v, want the port refused, not the channel", err)
	}
}
