package serve

import (
	"net"
	"net/netip"
	"sync"
)

// MaxClientConns bounds the connections one peer (an IPv4 address, an
// IPv6 /64) holds open to the listener at once; a connection beyond it is
// closed as soon as it is accepted, before anything is read from it, and
// counted as opsbot_http_rejected_total{route="*",
// reason="too_many_connections"}. It is well above what one address needs
// to read its MaxClientBodies bodies with MaxClientWaiting more waiting, so
// a flood from one address costs the listener little beyond that. A
// trusted proxy's connections are not bounded: the bodies they carry count
// against the clients X-Forwarded-For names.
const MaxClientConns = 512

// LimitConns wraps ln so that no peer but a trusted proxy holds more than
// MaxClientConns connections at once.
func LimitConns(ln net.Listener, trusted []netip.Prefix, rej *Rejects) net.Listener {
	return &connLimiter{Listener: ln, trusted: trusted, rej: rej, max: MaxClientConns, open: map[netip.Prefix]int{}}
}

type connLimiter struct {
	net.Listener
	trusted []netip.Prefix
	rej     *Rejects
	max     int

	mu   sync.Mutex
	open map[netip.Prefix]int
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var addr netip.Addr
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
			addr = ap.Addr().Unmap()
		}
		if addr.IsValid() && isTrusted(addr, l.trusted) {
			return c, nil
		}
		peer := bucket(addr)
		l.mu.Lock()
		if l.open[peer] >= l.max {
			l.mu.Unlock()
			c.Close()
			l.rej.Reject("*", "too_many_connections")
			continue
		}
		l.open[peer]++
		l.mu.Unlock()
		return &countedConn{Conn: c, l: l, peer: peer}, nil
	}
}

// countedConn is an accepted connection, counted until it is closed.
type countedConn struct {
	net.Conn
	l    *connLimiter
	peer netip.Prefix
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.open[c.peer]--; c.l.open[c.peer] == 0 {
			delete(c.l.open, c.peer)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
