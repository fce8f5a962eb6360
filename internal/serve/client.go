package serve

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientOf is the client a request's body counts against at the gate. It
// is the peer's address (RemoteAddr), unless the peer is a trusted proxy
// (http.trusted_proxies): then X-Forwarded-For is read from the right,
// past the trusted proxies' own addresses, and the first address that is
// not one is the client. Each proxy appends the address it got the request
// from, so that right-most untrusted address is the one a trusted proxy
// saw; whatever stands left of it the client may have written itself. When
// every entry is a trusted proxy's, the left-most is the client; an entry
// that is not an address (IP, or IP:port) ends the walk at the proxy that
// passed it on. X-Forwarded-For from a peer that is not trusted is
// ignored. An IPv4 client is one address; an IPv6 client is its /64 (what
// one machine usually gets). A peer that is no IP address is the zero
// Prefix, one client for all such.
func clientOf(r *http.Request, trusted []netip.Prefix) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr := parseAddr(host)
	if addr.IsValid() && isTrusted(addr, trusted) {
		addr = forwardedFor(r.Header.Values("X-Forwarded-For"), addr, trusted)
	}
	return bucket(addr)
}

// bucket is the client addr is counted as: itself when IPv4, its /64 when
// IPv6; the zero Prefix when it is no address.
func bucket(addr netip.Addr) netip.Prefix {
	if !addr.IsValid() {
		return netip.Prefix{}
	}
	if addr.Is4() {
		return netip.PrefixFrom(addr, 32)
	}
	return netip.PrefixFrom(addr, 64).Masked()
}

// forwardedFor walks the X-Forwarded-For headers' entries from the right,
// from peer, a trusted proxy (see clientOf).
func forwardedFor(headers []string, peer netip.Addr, trusted []netip.Prefix) netip.Addr {
	var hops []string
	for _, h := range headers {
		hops = append(hops, strings.Split(h, ",")...)
	}
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a := parseAddr(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			return addr
		}
		addr = a
		if !isTrusted(a, trusted) {
			return a
		}
	}
	return addr
}

// parseAddr parses an IP address, with a port or not ("192.0.2.7",
// "192.0.2.7:443", "[2001:db8::1]:443"); IPv4 in IPv6 is IPv4. Anything
// else is the zero Addr.
func parseAddr(s string) netip.Addr {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone("")
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
