package serve

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
)

// TestConnsPerClient: past max open connections from one address, the
// next is closed as soon as it is accepted, before anything is read, and
// counted; another address, and a trusted proxy, still get in; a closed
// connection frees its place.
func TestConnsPerClient(t *testing.T) {
	m := NewMetrics(BuildInfo("v", "r"), func() []remote.HostState { return nil })
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &connLimiter{Listener: inner, trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.9/32")},
		rej: NewRejects(m, slog.New(slog.DiscardHandler)), max: 2, open: map[netip.Prefix]int{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(ln)
	defer srv.Close()
	dial := func(from string) net.Conn {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// served says whether a request on c is answered, or c is closed.
	served := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		b := make([]byte, 12)
		_, err := io.ReadFull(c, b)
		return err == nil && string(b) == "HTTP/1.1 200"
	}
	a, b := dial("127.0.0.2"), dial("127.0.0.2")
	if !served(a) || !served(b) {
		t.Fatal("127.0.0.2's first two connections not served")
	}
	if served(dial("127.0.0.2")) {
		t.Error("127.0.0.2's third connection served, want it closed")
	}
	if !served(dial("127.0.0.1")) || !served(dial("127.0.0.9")) || !served(dial("127.0.0.9")) || !served(dial("127.0.0.9")) {
		t.Error("another address, or a trusted proxy, not served")
	}
	a.Close()
	if !testkit.Poll(10*time.Second, func() bool { return served(dial("127.0.0.2")) }) {
		t.Error("a connection after one of 127.0.0.2's closed: not served")
	}
	if got := testutil.ToFloat64(m.rejected.WithLabelValues("*", "too_many_connections")); got < 1 {
		t.Errorf("too_many_connections counted %v times", got)
	}
}
