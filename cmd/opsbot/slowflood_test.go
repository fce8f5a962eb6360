package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// slowFlood is a flood of slow, fake-signed deliveries to serve's
// /slack/events, as the probe sent them: each connection announces
// a 60,000-byte form body with a current X-Slack-Request-Timestamp and an
// X-Slack-Signature of v0= and 64 random hex digits, then trickles the body
// a byte every trickle. With keep, a connection the server answered or
// closed is opened again reopen later, so the flood holds its count.
type slowFlood struct {
	addr            string
	trickle, reopen time.Duration
	keep            bool

	started atomic.Int64 // connections that sent their headers
	stop    chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]bool
	answers map[string]int // the server's answers by status ("closed": none)
}

// startSlowFlood opens n connections spread over the loopback addresses
// from (round robin) to addr; it stops with the test, or at stopFlood.
func startSlowFlood(tb testing.TB, addr string, from []string, n int, keep bool) *slowFlood {
	tb.Helper()
	raiseFileLimit(tb, n+1024)
	f := newSlowFlood(addr, from, n, keep)
	tb.Cleanup(f.stopFlood)
	return f
}

func newSlowFlood(addr string, from []string, n int, keep bool) *slowFlood {
	f := &slowFlood{addr: addr, trickle: time.Second, reopen: time.Second, keep: keep, stop: make(chan struct{}),
		conns: map[net.Conn]bool{}, answers: map[string]int{}}
	for i := range n {
		f.wg.Go(func() { f.run(from[i%len(from)]) })
	}
	return f
}

// floodEnv makes this test binary a slow flood of its own (floodMain), so
// that a benchmark's probes do not share a process with it.
const floodEnv = "OPSBOT_TEST_SLOWFLOOD"

// floodMain runs the slow flood "ADDR N FROM,FROM..." (kept up) until its
// stdin closes: it prints "started N" as its connections send their
// headers, then "answers: ..." and "opened N" once stopped. It runs at the
// lowest priority (nice 19): an attacker's CPU is not the server's, and
// here they share the machine's cores.
func floodMain(spec string) int {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19); err != nil {
		fmt.Fprintln(os.Stderr, "flood: nice 19:", err)
	}
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s: want ADDR N FROM,FROM..., got %q\n", floodEnv, spec)
		return 2
	}
	n, _ := strconv.Atoi(f[1])
	fl := newSlowFlood(f[0], strings.Split(f[2], ","), n, true)
	closed := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(closed) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for last := int64(-1); ; {
		select {
		case <-closed:
			fl.stopFlood()
			_, answers := fl.answered()
			fmt.Printf("answers: %s\nopened %d\n", answers, fl.started.Load())
			return 0
		case <-tick.C:
			if s := fl.started.Load(); s != last {
				fmt.Printf("started %d\n", s)
				last = s
			}
		}
	}
}

// run is one of the flood's connections, from the address from.
func (f *slowFlood) run(from string) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	for {
		c, err := d.Dial("tcp", f.addr)
		if err == nil {
			f.hold(c)
		} else {
			f.count("dial error")
		}
		if !f.keep {
			return
		}
		select { // the flood's pace, not a wait for a condition
		case <-f.stop:
			return
		case <-time.After(f.reopen):
		}
	}
}

// hold sends the headers and trickles the body on c until the server
// answers or closes it, or the flood stops.
func (f *slowFlood) hold(c net.Conn) {
	f.mu.Lock()
	select {
	case <-f.stop:
		f.mu.Unlock()
		c.Close()
		return
	default:
	}
	f.conns[c] = true
	f.mu.Unlock()
	defer func() { f.mu.Lock(); delete(f.conns, c); f.mu.Unlock(); c.Close() }()
	sig := make([]byte, 32)
	rand.Read(sig)
	fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
		"X-Slack-Request-Timestamp: %d\r\nX-Slack-Signature: v0=%s\r\nContent-Length: 60000\r\n\r\n", time.Now().Unix(), hex.EncodeToString(sig))
	f.started.Add(1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(f.trickle)
		defer tick.Stop()
		for {
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-done:
				return
			}
		}
	}()
	line, err := bufio.NewReader(c).ReadString('\n')
	if f := strings.Fields(line); err == nil && len(f) >= 2 {
		line = f[1]
	} else {
		line = "closed"
	}
	f.count(line)
}

func (f *slowFlood) count(what string) {
	f.mu.Lock()
	f.answers[what]++
	f.mu.Unlock()
}

// answered is how many of the flood's requests got an answer, and a line
// of them by status.
func (f *slowFlood) answered() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, parts := 0, []string{}
	for _, k := range slices.Sorted(maps.Keys(f.answers)) {
		if k != "closed" && k != "dial error" {
			n += f.answers[k]
		}
		parts = append(parts, k+": "+strconv.Itoa(f.answers[k]))
	}
	return n, strings.Join(parts, ", ")
}

// stopFlood closes every connection and waits for them to end.
func (f *slowFlood) stopFlood() {
	f.mu.Lock()
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// loopbacks are the n addresses 127.0.0.first onwards.
func loopbacks(first, n int) []string {
	var as []string
	for i := range n {
		as = append(as, fmt.Sprintf("127.0.0.%d", first+i))
	}
	return as
}

// raiseFileLimit makes sure this process may open need files, raising its
// soft limit towards the hard one if it must (Go raises it to the hard one
// at start already; children get the same).
func raiseFileLimit(tb testing.TB, need int) {
	tb.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		tb.Fatal(err)
	}
	if l.Cur >= uint64(need) {
		return
	}
	if l.Max < uint64(need) {
		tb.Skipf("open files limited to %d (hard), %d needed: raise it (ulimit -Hn)", l.Max, need)
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		tb.Fatalf("raise the open files limit to %d: %v", l.Max, err)
	}
}

// TestServeSlowFloodLeavesRoom: 1,100 connections trickling fake-signed
// bodies (more than the small-body pool's 1,024), from one address and
// then spread over 16, do not shut out a signed slash command from a 17th
// address (127.0.0.1, as each of Slack's many addresses is): it is acked
// 200 while they hold. /metrics counts the flood's refusals once, by the
// listener's reasons (the adapter does not count them again as bad_body).
func TestServeSlowFloodLeavesRoom(t *testing.T) {
	for _, c := range []struct {
		name string
		from []string
	}{{"one address", loopbacks(2, 1)}, {"16 addresses", loopbacks(2, 16)}} {
		t.Run(c.name, func(t *testing.T) {
			_, base := startSlackServe(t, slackSection(newSlackServer(t)))
			f := startSlowFlood(t, strings.TrimPrefix(base, "http://"), c.from, 1100, false)
			testkit.WaitFor(t, time.Minute, "1,100 slow connections holding, the server answering some", func() bool {
				n, _ := f.answered()
				return f.started.Load() == 1100 && n > 0
			})
			code, body := signedSlash(e2eSigningSecret, time.Now(), "/opsbot", "help").post(t, base)
			n, answers := f.answered()
			if code != 200 {
				t.Fatalf("a signed command while 1,100 slow connections from %d addresses hold: %d %s (the flood's answers: %s)",
					len(c.from), code, body, answers)
			}
			t.Logf("the flood's answers so far: %s", answers)
			busy, bad := rejectedCount(t, base, "client_over_capacity"), rejectedCount(t, base, "bad_body")
			if busy < float64(n) || bad != 0 {
				t.Errorf("with %d of the flood answered 429: client_over_capacity %v, bad_body %v; want at least %d, and no bad_body",
					n, busy, bad, n)
			}
			f.stopFlood() // the connections still held end mid-body: counted bad_body, once each
		})
	}
}

// rejectedCount is opsbot_http_rejected_total{route="/slack/events"} for
// reason in serve's /metrics (0 when absent).
func rejectedCount(t *testing.T, base, reason string) float64 {
	_, metrics := httpGet(t, base+"/metrics")
	prefix := `opsbot_http_rejected_total{reason="` + reason + `",route="/slack/events"} `
	for l := range strings.Lines(metrics) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), prefix); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
