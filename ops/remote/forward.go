package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
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

// DialContext opens a TCP connection to addr (host:port, resolved and dialled by the host's SSH
// server, so 127.0.0.1 is the host's own loopback) through the host's pooled SSH connection,
// dialling it when there is none. network must be "tcp", "tcp4" or "tcp6". A channel the
// server does not open is a *ForwardError; when the cached connection turns out to be broken,
// DialContext dials the host again once (nothing was sent to the target). It returns promptly
// when ctx ends; a connection that opens later is closed. The net.Conn returned has no
// deadlines (SetDeadline fails) and lives until closed or until the SSH connection ends. Safe
// for concurrent use: it has the signature of net.Dialer.DialContext, for http.Transport.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	what := fmt.Sprintf("connect to %s through the SSH connection to %s", addr, h.cfg.Name)
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("%s: network %q: only tcp is forwarded", what, network)
	}
	if _, port, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return nil, fmt.Errorf("%s: invalid port %q", what, port)
	}
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
