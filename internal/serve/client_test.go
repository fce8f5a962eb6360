package serve

import (
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// TestClientOf: X-Forwarded-For names the client only when the peer is a
// trusted proxy, and then its right-most address that is not a trusted
// proxy's; forged entries left of it, and any from an untrusted peer, are
// ignored.
func TestClientOf(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}
	for _, c := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no proxy", "192.0.2.7:5555", nil, "192.0.2.7/32"},
		{"untrusted peer's header ignored", "192.0.2.7:5555", []string{"198.51.100.7"}, "192.0.2.7/32"},
		{"trusted peer, no header", "127.0.0.1:5555", nil, "127.0.0.1/32"},
		{"trusted peer", "127.0.0.1:5555", []string{"198.51.100.7"}, "198.51.100.7/32"},
		{"forged entry left of the real one", "127.0.0.1:5555", []string{"203.0.113.66, 198.51.100.7"}, "198.51.100.7/32"},
		{"past a chain of trusted proxies", "127.0.0.1:5555", []string{"203.0.113.66, 198.51.100.7, 10.1.2.3"}, "198.51.100.7/32"},
		{"two headers read as one list", "127.0.0.1:5555", []string{"203.0.113.66", "198.51.100.7, 10.1.2.3"}, "198.51.100.7/32"},
		{"every entry trusted: the left-most", "127.0.0.1:5555", []string{"10.9.9.9, 10.1.2.3"}, "10.9.9.9/32"},
		{"garbage ends the walk at the proxy that passed it", "127.0.0.1:5555", []string{"198.51.100.7, bogus, 10.1.2.3"}, "10.1.2.3/32"},
		{"an entry with a port", "127.0.0.1:5555", []string{"198.51.100.7:443"}, "198.51.100.7/32"},
		{"IPv6 counts by /64", "127.0.0.1:5555", []string{"[2001:db8:1:2:3:4:5:6]:443"}, "2001:db8:1:2::/64"},
		{"IPv6 peer", "[2001:db8::9]:5555", []string{"198.51.100.7"}, "2001:db8::/64"},
		{"IPv4 in IPv6 is IPv4", "[::ffff:127.0.0.1]:5555", []string{"198.51.100.7"}, "198.51.100.7/32"},
	} {
		r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientOf(r, trusted); got.String() != c.want {
			t.Errorf("%s: client %s, want %s", c.name, got, c.want)
		}
	}
}

// TestForwardedForAtTheGate: with 127.0.0.1 reading its one body, a body
// sent from 127.0.0.1 with X-Forwarded-For: 198.51.100.7 counts against
// 198.51.100.7 when 127.0.0.1 is a trusted proxy (it is read), and against
// 127.0.0.1 when it is not (429, as 127.0.0.1 reads its share).
func TestForwardedForAtTheGate(t *testing.T) {
	lim := defaultLimits
	lim.clientBodies, lim.clientWaiting, lim.grace = 1, 0, time.Minute
	for _, c := range []struct {
		name    string
		trusted []netip.Prefix
		want    int
	}{
		{"trusted", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, http.StatusOK},
		{"untrusted", nil, http.StatusTooManyRequests},
	} {
		t.Run(c.name, func(t *testing.T) {
			inside := make(chan struct{}, 2)
			srv, _, _ := gated(t, lim, c.trusted, inside)
			release := make(chan struct{})
			done := make(chan struct{})
			go func() { heldPost(srv.URL+"/slack/events", "127.0.0.1", 100, release); close(done) }()
			<-inside
			req := mustRequest(t, srv.URL+"/slack/events", "command=%2Fmtp&text=show")
			req.Header.Set("X-Forwarded-For", "198.51.100.7")
			if code, err := doFrom(req, "127.0.0.1"); code != c.want {
				t.Errorf("X-Forwarded-For from a peer %s: %d %v, want %d", c.name, code, err, c.want)
			}
			close(release)
			<-done
		})
	}
}
