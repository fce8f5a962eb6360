package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops/remote"
)

// gated serves a readingRoute on /slack/events within lim, trusting
// trusted's X-Forwarded-For; it returns the server, the gate and the
// metrics it counts refusals in.
func gated(t *testing.T, lim limits, trusted []netip.Prefix, inside chan<- struct{}) (*httptest.Server, *bodyGate, *Metrics) {
	t.Helper()
	m := NewMetrics(BuildInfo("v", "r"), func() []remote.HostState { return nil })
	mux := http.NewServeMux()
	mux.Handle("POST /slack/events", readingRoute(inside))
	gate := newBodyGate(&lim)
	srv := httptest.NewServer(limitBodies(mux, gate, trusted, NewRejects(m, slog.New(slog.DiscardHandler))))
	t.Cleanup(srv.Close)
	return srv, gate, m
}

// state is what the gate holds for client: bodies being read, requests
// waiting, and in the small pool.
func (g *bodyGate) state(client string) (reading, waiting, small int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.clients[netip.MustParsePrefix(client)]; c != nil {
		reading, waiting = c.reading, len(c.queue)
	}
	return reading, waiting, g.small
}

func rejected(m *Metrics, reason string) float64 {
	return testutil.ToFloat64(m.rejected.WithLabelValues("/slack/events", reason))
}

// TestSlowBodyCut: a body announced at 60,000 bytes and trickled a byte
// every 250 ms (far under MinBodyRate) is cut once BodyGrace is over,
// before ReadTimeout would have: answered 408 by the listener (not the
// route's 400), counted too_slow, the connection closed. A body of the same
// size sent at once goes through.
func TestSlowBodyCut(t *testing.T) {
	srv, _, m := gated(t, defaultLimits, nil, nil)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n")
	defer trickle(c, 250*time.Millisecond)()
	t0 := time.Now()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	answer, err := io.ReadAll(c) // until the server closes the connection
	took := time.Since(t0)
	if !strings.HasPrefix(string(answer), "HTTP/1.1 408") || !strings.Contains(string(answer), "request body too slow") {
		t.Fatalf("a trickled body after %s: %q %v; want 408, request body too slow, and the connection closed", took, answer, err)
	}
	if took >= ReadTimeout {
		t.Errorf("cut after %s: by ReadTimeout, not by its pace", took)
	}
	if got := rejected(m, "too_slow"); got != 1 {
		t.Errorf("too_slow counted %v times, want 1", got)
	}
	if code, err := doFrom(mustRequest(t, srv.URL+"/slack/events", strings.Repeat("x", 60000)), ""); code != http.StatusOK {
		t.Errorf("60,000 bytes at once: %d %v", code, err)
	}
}

// TestHandlerOutlivesTheBodyPace: once a body is read, its pace no longer
// applies: a route that takes longer than the body's last deadline keeps
// its request's context (net/http would cancel it at a read deadline set
// after the body ended).
func TestHandlerOutlivesTheBodyPace(t *testing.T) {
	lim := defaultLimits
	lim.grace = 50 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("POST /slack/events", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select { // past the body's last deadline: time passing, not a condition
		case <-r.Context().Done():
			http.Error(w, "context ended: "+context.Cause(r.Context()).Error(), http.StatusInternalServerError)
		case <-time.After(10 * lim.grace):
		}
	})
	srv := httptest.NewServer(limitBodies(mux, newBodyGate(&lim), nil, nil))
	defer srv.Close()
	if code, err := doFrom(mustRequest(t, srv.URL+"/slack/events", "command=%2Fmtp&text=show"), ""); code != http.StatusOK {
		t.Fatalf("a route slower than the body's pace: %d %v", code, err)
	}
}

// TestOneAddressCannotShutOthersOut, at a small scale: an address reads at
// most clientBodies bodies at once, one more waits its turn and gets the
// first slot that frees, more are answered 429 at once; addresses that
// fill the pool's shared part cannot take its reserve, which a newcomer
// (127.0.0.1) still gets.
func TestOneAddressCannotShutOthersOut(t *testing.T) {
	lim := limits{clientBodies: 3, clientWaiting: 1, clientWait: time.Minute, grace: time.Minute, rate: MinBodyRate,
		small: 8, smallReserve: 2, large: 1, largeBytes: MaxBody}
	inside := make(chan struct{}, 16)
	srv, gate, m := gated(t, lim, nil, inside)
	url := srv.URL + "/slack/events"
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // a failed test lets its held bodies go
	var wg sync.WaitGroup
	codes := make(chan string, 16)
	hold := func(from string) {
		wg.Go(func() {
			code, err := heldPost(url, from, 100, release)
			codes <- fmt.Sprintf("%s %d %v", from, code, err)
		})
	}
	for _, from := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3", "127.0.0.4"} {
		hold(from)
		<-inside
	}
	// 127.0.0.2 reads three: a fourth waits for its turn, a fifth is refused.
	hold("127.0.0.2")
	testkit.WaitFor(t, 5*time.Second, "a fourth body of 127.0.0.2's waiting", func() bool { _, w, _ := gate.state("127.0.0.2/32"); return w == 1 })
	if code, err := doFrom(mustRequest(t, url, "x"), "127.0.0.2"); code != http.StatusTooManyRequests {
		t.Fatalf("127.0.0.2's fifth body at once: %d %v, want 429", code, err)
	}
	// The shared part is full (6 of 8): 127.0.0.3 reads two already and
	// cannot take the reserve; 127.0.0.1 reads none, and can.
	if code, err := doFrom(mustRequest(t, url, "x"), "127.0.0.3"); code != http.StatusServiceUnavailable {
		t.Fatalf("127.0.0.3's third body: %d %v, want 503 (the reserve is for newcomers)", code, err)
	}
	if code, err := doFrom(mustRequest(t, url, "command=%2Fmtp&text=show"), "127.0.0.1"); code != http.StatusOK {
		t.Fatalf("a newcomer's body while two addresses fill the shared part: %d %v", code, err)
	}
	<-inside
	once.Do(func() { close(release) }) // the held bodies end: 127.0.0.2's waiter takes a freed slot
	wg.Wait()
	close(codes)
	for c := range codes {
		if !strings.HasSuffix(c, " 200 <nil>") {
			t.Errorf("held or waiting body: %s, want 200", c)
		}
	}
	if r, w, s := gate.state("127.0.0.2/32"); r != 0 || w != 0 || s != 0 {
		t.Errorf("after all: 127.0.0.2 reading %d, waiting %d; small pool %d; want all 0", r, w, s)
	}
	if cb, pf := rejected(m, "client_over_capacity"), rejected(m, "over_capacity"); cb != 1 || pf != 1 {
		t.Errorf("counted client_over_capacity %v, over_capacity %v; want 1 each", cb, pf)
	}
}

// TestWaitingTurnEnds: a body whose address reads its share and whose
// turn does not come within clientWait is answered 429 with Retry-After,
// and its connection closed after the answer though its sender keeps
// trickling (nothing more of it is read).
func TestWaitingTurnEnds(t *testing.T) {
	lim := defaultLimits
	lim.clientBodies, lim.clientWait, lim.grace = 1, 50*time.Millisecond, time.Minute
	inside := make(chan struct{}, 1)
	srv, _, _ := gated(t, lim, nil, inside)
	release := make(chan struct{})
	done := make(chan struct{})
	go func() { heldPost(srv.URL+"/slack/events", "127.0.0.2", 100, release); close(done) }()
	<-inside
	answer := trickleFrom(t, srv, "127.0.0.2")
	if !strings.HasPrefix(answer, "HTTP/1.1 429") || !strings.Contains(answer, "Retry-After: 1") {
		t.Errorf("a waiter whose turn did not come: %q, want 429 with Retry-After: 1, then the connection closed", answer)
	}
	close(release)
	<-done
}

// TestAnsweredUnreadIsClosed: a route that answers without reading the
// body (as the Slack adapter refuses an unsigned delivery) has the
// connection closed after its answer, the rest of the body unread, though
// its sender keeps trickling.
func TestAnsweredUnreadIsClosed(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /slack/events", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not running yet", http.StatusServiceUnavailable)
	})
	lim := defaultLimits
	srv := httptest.NewServer(limitBodies(mux, newBodyGate(&lim), nil, nil))
	defer srv.Close()
	if answer := trickleFrom(t, srv, "127.0.0.1"); !strings.HasPrefix(answer, "HTTP/1.1 503") {
		t.Errorf("a route's answer to an unread body: %q, want 503, then the connection closed", answer)
	}
}

// trickleFrom sends srv a request from the address from that announces a
// 4,096-byte body and trickles it a byte every 100 ms; it returns all the
// server sent until it closed the connection (failing the test if it did
// not within 30 s: net/http would read on to reuse it).
func trickleFrom(t *testing.T, srv *httptest.Server, from string) string {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n")
	defer trickle(c, 100*time.Millisecond)()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	all, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) { // closed with the trickle unread: a reset, once the answer is out
		t.Errorf("the connection not closed after the answer %q: %v", all, err)
	}
	return string(all)
}

// trickle writes one byte of a body on c every pace, from now until the
// function it returns is called or a write fails.
func trickle(c net.Conn, pace time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() { // the trickle's pace, not a wait for a condition
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for {
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done) }
}

// TestRawConnectionsPerAddress: what the flood benchmark does, at a small
// scale, over raw connections: 40 connections from one address announce
// bodies and send one byte; at most clientBodies of them are read, the
// others wait or are refused, and none holds the pool beyond that.
func TestRawConnectionsPerAddress(t *testing.T) {
	lim := defaultLimits
	lim.grace = time.Minute
	srv, gate, _ := gated(t, lim, nil, nil)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	for range 40 {
		c, err := d.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\na")
	}
	testkit.WaitFor(t, 10*time.Second, "16 of 127.0.0.2's bodies read, 24 waiting", func() bool {
		r, w, s := gate.state("127.0.0.2/32")
		return r == MaxClientBodies && w == 40-MaxClientBodies && s == MaxClientBodies
	})
	// The waiting ones are answered 429 once their wait ends; the ones
	// being read are held (their pace is lifted here).
	answers := make(chan string, len(conns))
	for _, c := range conns {
		go func() {
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				line = "held"
			}
			answers <- strings.TrimSpace(line)
		}()
	}
	got := map[string]int{}
	for range conns {
		got[<-answers]++
	}
	if got["HTTP/1.1 429 Too Many Requests"] != 40-MaxClientBodies || got["held"] != MaxClientBodies {
		t.Errorf("answers %v, want %d 429 and %d held", got, 40-MaxClientBodies, MaxClientBodies)
	}
}
