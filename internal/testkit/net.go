package testkit

import (
	"net"
	"testing"
)

// ClosedURL is the http URL of a loopback port nothing listens on (it was
// listened on and closed), for tests of what a client says when refused.
func ClosedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}
