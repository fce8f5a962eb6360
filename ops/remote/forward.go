package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"
)

// ForwardError is a direct-tcpip channel (a TCP connection made from the host's side, RFC 4254
// §7.2) that the host's SSH server did not open. Prohibited means the server refuses to forward
// at all (sshd's AllowTcpForwarding no, or a key restricted with no-port-forwarding): nothing
// will reach the target through that host until its configuration changes. Otherwise the
// server tried and could not connect to the target (nothing listens there, or it is
// unreachable from the host): such an error is errors.Is syscall.ECONNREFUSED, as a refused
// direct connection is, so that "the engine's port refuses" reads the same either way.
type ForwardError struct {
	Host    string // the configured host whose SSH server was asked
	Target  string // host:port it was asked to connect to, as seen from that host
	Reason  ssh.RejectionReason
	Message string // the server's own words
}

// Prohibited reports whether the server refuses to forward at all.
func (e *ForwardError) Prohibited() bool { return e.Reason == ssh.Prohibited }

func (e *ForwardError) Error() string {
	if e.Prohibited() {
		return fmt.Sprintf("the SSH server on %s refused to forward to %s (direct-tcpip: %s): "+
			"set AllowTcpForwarding yes (or local) in its sshd_config and reload sshd, or drop via_ssh from the service",
			e.Host, e.Target, e.serverSaid())
	}
	return fmt.Sprintf("the SSH server on %s could not connect to %s (direct-tcpip: %s)", e.Host, e.Target, e.serverSaid())
}

// serverSaid is the rejection's reason and the server's message ("administratively
// prohibited: open failed").
func (e *ForwardError) serverSaid() string {
	if e.Message == "" || e.Message == e.Reason.String() {
		return e.Reason.String()
	}
	return e.Reason.String() + ": " + e.Message
}

// Is makes a failed connection to the target (not a refusal to forward) match
// syscall.ECONNREFUSED.
func (e *ForwardError) Is(target error) bool {
	return target == syscall.ECONNREFUSED && !e.Prohibited()
}

// ErrNotTarget is a Tunnel's refusal of an address other than its target.
var ErrNotTarget = errors.New("refused: not the tunnel's target")

// Tunnel opens TCP connections through one host's SSH connection (direct-tcpip channels, RFC
// 4254 §7.2) to one target, fixed when it is made: asked for any other address, it refuses
// before the host's SSH server is asked anything. So no caller (an HTTP client following a
// redirect, a future one) can make the host connect elsewhere. Safe for concurrent use.
type Tunnel struct {
	h      *Host
	target string // host:port, as the host's side sees it
	host   string // target's host
	port   uint64 // target's port
}

// Tunnel returns the tunnel through h to target (host:port, resolved and dialled by the host's
// SSH server, so 127.0.0.1 is the host's own loopback). target's port must be 1 to 65535.
func (h *Host) Tunnel(target string) (*Tunnel, error) {
	host, port, err := splitTarget(target)
	if err != nil {
		return nil, fmt.Errorf("tunnel through the SSH connection to %s to %s: %w", h.cfg.Name, target, err)
	}
	return &Tunnel{h: h, target: target, host: host, port: port}, nil
}

// Target is the one address t connects to.
func (t *Tunnel) Target() string { return t.target }

// splitTarget splits host:port, its port a number from 1 to 65535.
func splitTarget(addr string) (string, uint64, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("invalid port %q", port)
	}
	return host, n, nil
}

// DialContext opens a TCP connection to addr, which must be t's target (the same host, letter
// case aside, and the same port number); any other address is an error wrapping ErrNotTarget,
// and nothing is sent to the host. network must be "tcp", "tcp4" or "tcp6". It goes through
// the host's pooled SSH connection, dialling it when there is none. A channel the server does
// not open is a *ForwardError; when the cached connection turns out to be broken, DialContext
// dials the host again once (nothing was sent to the target). It returns promptly when ctx
// ends; a connection that opens later is closed. The net.Conn returned has no deadlines
// (SetDeadline fails) and lives until closed or until the SSH connection ends. It has the
// signature of net.Dialer.DialContext, for http.Transport.
func (t *Tunnel) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	what := fmt.Sprintf("connect to %s through the SSH connection to %s", addr, t.h.cfg.Name)
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("%s: network %q: only tcp is forwarded", what, network)
	}
	host, port, err := splitTarget(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if port != t.port || !strings.EqualFold(host, t.host) {
		return nil, fmt.Errorf("%s: %w: it connects only to %s", what, ErrNotTarget, t.target)
	}
	return t.open(ctx, network, what)
}

// open opens a direct-tcpip channel to t's target; what names the connection in errors.
func (t *Tunnel) open(ctx context.Context, network, what string) (net.Conn, error) {
	h, addr := t.h, t.target
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		c, err := h.client(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		nc, err := c.client.DialContext(ctx, network, addr)
		if err == nil {
			return nc, nil
		}
		var oe *ssh.OpenChannelError
		if errors.As(err, &oe) {
			return nil, &ForwardError{Host: h.cfg.Name, Target: addr, Reason: oe.Reason, Message: oe.Message}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", what, ctx.Err())
		}
		// The channel could not even be asked for: the connection is broken.
		h.forget(c)
		if attempt == 0 {
			h.p.log.Info("ssh channel failed: reconnecting", "host", h.cfg.Name, "err", err)
			continue
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
}
