package serve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
)

// readingRoute is a route that reads its body as the Slack adapter does
// (answering 400 when it cannot) after its first byte, which it reports on
// inside: a body that reported is admitted and held open until its sender
// sends the rest.
func readingRoute(inside chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var first [1]byte
		if _, err := io.ReadFull(r.Body, first[:]); err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if inside != nil {
			inside <- struct{}{}
		}
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		}
	})
}

// heldPost posts a body of size bytes from the client's own address: its
// first byte at once, the rest once release is closed. It returns the
// answer's status, or 0 and the error.
func heldPost(url string, from string, size int, release <-chan struct{}) (int, error) {
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("x"))
		<-release
		pw.Write(bytes.Repeat([]byte("x"), size-1))
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	req.ContentLength = int64(size)
	return doFrom(req, from)
}

// doFrom sends req from the loopback address from (127.0.0.1 when empty)
// on a connection of its own.
func doFrom(req *http.Request, from string) (int, error) {
	d := &net.Dialer{}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestBodiesLimited: a body over MaxBody is refused 413 before it is read;
// past MaxLargeBodies large bodies being read at once, the next large one is
// answered 503 with Retry-After at once (the route's own answer to the
// failed read is dropped), while a small one (a slash command) still goes
// through; each refusal is counted by route and reason, and logged once
// for the second with its count; a large body goes through again once the
// others are done. (One client sends them all here: its own cap and the
// pools' reserves are lifted, and the held bodies are not cut for pace.)
func TestBodiesLimited(t *testing.T) {
	m := NewMetrics(BuildInfo("v", "r"), func() []remote.HostState { return nil })
	var logged bytes.Buffer
	var logMu sync.Mutex
	rej := NewRejects(m, slog.New(slog.NewTextHandler(lockedWriter{&logged, &logMu}, nil)))
	lim := defaultLimits
	lim.clientBodies, lim.smallReserve, lim.largeReserve, lim.grace = 1000, 0, 0, time.Minute
	inside := make(chan struct{}, MaxLargeBodies+1)
	h, err := handler(Options{Metrics: m, Rejects: rej, Routes: map[string]http.Handler{"POST /slack/events": readingRoute(inside)}}, &lim)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	url := srv.URL + "/slack/events"
	// Headers that announce more than MaxBody, and no body at all: the
	// answer comes before any of it is read.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", MaxBody+1)
	status, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.Contains(status, "413") {
		t.Fatalf("a body over MaxBody: %q %v, want 413", status, err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	var wg sync.WaitGroup
	defer wg.Wait()
	defer releaseAll() // a failed check below must not leave the held bodies to time out
	for range MaxLargeBodies {
		wg.Go(func() {
			if code, err := heldPost(url, "", SmallBody+1, release); code != http.StatusOK {
				t.Errorf("a held large body once released: %d %v", code, err)
			}
		})
	}
	for range MaxLargeBodies {
		<-inside
	}
	resp := postUnread(t, srv.Listener.Addr().String(), SmallBody+1)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("past MaxLargeBodies: %d, Retry-After %q; want 503 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, err := doFrom(mustRequest(t, url, "{}"), ""); code != http.StatusOK {
		t.Fatalf("a small body while the large pool is full: %d %v", code, err)
	}
	<-inside
	releaseAll()
	wg.Wait()
	go func() { <-inside }()
	if code, err := doFrom(mustRequest(t, url, strings.Repeat("x", SmallBody+1)), ""); code != http.StatusOK {
		t.Fatalf("once the others were read: %d %v", code, err)
	}
	for reason, want := range map[string]float64{"too_large": 1, "over_capacity": 1} {
		if got := testutil.ToFloat64(m.rejected.WithLabelValues("/slack/events", reason)); got != want {
			t.Errorf("opsbot_http_rejected_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	var out string
	if !testkit.Poll(5*time.Second, func() bool {
		logMu.Lock()
		out = logged.String()
		logMu.Unlock()
		return strings.Count(out, "refused HTTP requests") == 2
	}) {
		t.Fatalf("refusals not logged once each within a second: %q", out)
	}
	if !strings.Contains(out, "count=1") {
		t.Errorf("log: %s", out)
	}
}

// postUnread posts a body of size bytes to /slack/events at addr over a
// raw connection and returns the answer. The server may answer and close
// before reading the body, which resets the connection under a client
// still writing it (net/http's client then reports the broken pipe, not
// the answer); here the body is written on the side, its errors ignored,
// and the answer read whatever became of it.
func postUnread(t *testing.T, addr string, size int) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
		c.Write(bytes.Repeat([]byte("x"), size))
	}()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a body of %d bytes: %v", size, err)
	}
	resp.Body.Close()
	return resp
}

func mustRequest(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
