package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	slackad "github.com/opsbot/opsbot/bot/slack"
)

// rssKB reads a process's resident set from /proc.
func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// BenchmarkServeFlood: `opsbot serve` with Slack in HTTP mode under the
// flood that once held 376 MB: 300 connections that announce 1 MiB bodies
// and hold, and 500 that send signed-looking headers and trickle their body
// a byte every 5 s. It reports the process's peak RSS, when the last
// trickling connection was closed by the server, /healthz p99 during the
// flood, and the ack of a correctly signed slash command sent during it.
// Goals: RSS under 120 MB, trickles closed within 20 s, /healthz p99 under
// 100 ms, the signed command acked 200 within 3 s. The flood comes from
// 127.0.0.2, the probes and the command from 127.0.0.1 (each address reads
// at most 16 bodies at once: a flood from Slack's own address is not the
// case measured).
func BenchmarkServeFlood(b *testing.B) {
	api := newSlackServer(b)
	p, base := startSlackServe(b, slackSection(api))
	addr := strings.TrimPrefix(base, "http://")
	pid := p.cmd.Process.Pid
	for b.Loop() {
		var peak atomic.Int64
		stopSampling := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if kb := int64(rssKB(pid)); kb > peak.Load() {
					peak.Store(kb)
				}
				select {
				case <-stopSampling:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		before := rssKB(pid)
		t0 := time.Now()
		var conns []net.Conn
		var mu sync.Mutex
		var wg sync.WaitGroup
		flooder := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
		open := func() net.Conn {
			c, err := flooder.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			return c
		}
		for range 300 {
			wg.Go(func() {
				c := open()
				fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n")
				c.Write(make([]byte, 32<<10)) // and holds the rest
			})
		}
		var closedLast atomic.Int64
		for range 500 {
			wg.Go(func() {
				c := open()
				ts := strconv.FormatInt(time.Now().Unix(), 10)
				fmt.Fprintf(c, "POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
					"X-Slack-Request-Timestamp: %s\r\nX-Slack-Signature: v0=%064d\r\nContent-Length: 4096\r\n\r\n", ts, 0)
				done := make(chan struct{})
				go func() { // a byte every 5 s until the server closes the connection
					defer close(done)
					for {
						if _, err := c.Write([]byte("a")); err != nil {
							return
						}
						select {
						case <-time.After(5 * time.Second):
						case <-stopSampling:
							return
						}
					}
				}()
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				bufio.NewReader(c).ReadString(0) // until the server answers and closes, or gives up on us
				if d := int64(time.Since(t0)); d > closedLast.Load() {
					closedLast.Store(d)
				}
			})
		}
		// During the flood: probes and one real command.
		time.Sleep(500 * time.Millisecond) // let the flood take hold: part of what is measured, not a wait for a condition
		var lat []time.Duration
		for range 100 {
			s := time.Now()
			code, _ := httpGet(b, base+"/healthz")
			lat = append(lat, time.Since(s))
			if code != 200 {
				b.Fatalf("/healthz during the flood: %d", code)
			}
		}
		slices.Sort(lat)
		s := time.Now()
		code, body := signedSlash(e2eSigningSecret, time.Now(), "/opsbot", "help").post(b, base)
		ack := time.Since(s)
		if code != http.StatusOK {
			b.Fatalf("a signed command during the flood: %d %s", code, body)
		}
		wg.Wait()
		close(stopSampling)
		<-sampled
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		b.ReportMetric(float64(peak.Load())/1024, "MB-peak-rss")
		b.ReportMetric(time.Duration(closedLast.Load()).Seconds(), "s-last-trickle-closed")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-healthz-p99")
		b.ReportMetric(float64(ack.Microseconds())/1000, "ms-signed-ack")
		b.Logf("flood of 300 held 1 MiB bodies and 500 trickling ones: RSS %d -> peak %d MB; last trickle closed after %s; /healthz p50 %s p99 %s; signed /opsbot help acked in %s",
			before/1024, peak.Load()/1024, time.Duration(closedLast.Load()).Round(time.Millisecond), lat[len(lat)/2], lat[len(lat)*99/100], ack)
	}
}

// BenchmarkServeSlowFlood: `opsbot serve` with Slack in HTTP mode while slow
// connections trickle fake-signed bodies (Content-Length 60000, a current
// timestamp, X-Slack-Signature v0= and 64 hex digits, a byte a second;
// each opened again a second after the server answers or closes it): 2,000
// from one address (127.0.0.2), and separately 1,100 spread over 127.0.0.2
// to 127.0.0.17. Once every connection has sent its headers, 20 signed
// slash commands come from 127.0.0.1, one every 500 ms, and /healthz is
// asked every 50 ms meanwhile. It reports how many of the 20 were acked 200
// within 3 s, the slowest ack, /healthz p50 and p99, the process's peak
// RSS, and how the server answered the flood. Goals: 20 of 20 within 3 s,
// /healthz p99 under 100 ms, RSS under 150 MB. Figures only.
//
//	go test -tags goolm -run XXX -bench ServeSlowFlood -benchtime 1x ./cmd/opsbot
func BenchmarkServeSlowFlood(b *testing.B) {
	for _, c := range []struct {
		name string
		from []string
		n    int
	}{{"2000-from-one-address", loopbacks(2, 1), 2000}, {"1100-from-16-addresses", loopbacks(2, 16), 1100}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				slowFloodOnce(b, c.from, c.n)
			}
		})
	}
}

// slowFloodOnce runs BenchmarkServeSlowFlood's measure once, against a
// serve process of its own.
func slowFloodOnce(b *testing.B, from []string, n int) {
	api := newSlackServer(b)
	p, base := startSlackServe(b, slackSection(api))
	stopRSS := sampleRSS(p.cmd.Process.Pid)
	before, cpu0 := rssKB(p.cmd.Process.Pid), cpuSeconds(p.cmd.Process.Pid)
	t0 := time.Now()
	f := spawnFlood(b, strings.TrimPrefix(base, "http://"), from, n)
	pollServe(b, p, 2*time.Minute, "every flood connection sent its headers", func() bool { return f.started.Load() >= int64(n) })
	probes := make(chan []time.Duration)
	stopProbes := make(chan struct{})
	go func() { probes <- probeHealthz(base, stopProbes) }()
	client := &http.Client{Timeout: 10 * time.Second}
	acks := make([]time.Duration, 20)
	codes := make([]int, 20)
	var wg sync.WaitGroup
	pace := time.NewTicker(500 * time.Millisecond) // the commands' pace: part of what is measured
	for i := range acks {
		wg.Go(func() { codes[i], acks[i] = timedSlash(client, base) })
		<-pace.C
	}
	pace.Stop()
	wg.Wait()
	close(stopProbes)
	lat := <-probes
	answers := f.stop(b)
	peakKB := stopRSS()
	cpu, wall := cpuSeconds(p.cmd.Process.Pid)-cpu0, time.Since(t0)
	ok := 0
	for i, code := range codes {
		if code == http.StatusOK && acks[i] <= 3*time.Second {
			ok++
		}
	}
	slices.Sort(lat)
	p99 := lat[min(len(lat)-1, len(lat)*99/100)]
	b.ReportMetric(float64(ok), "acked-of-20")
	b.ReportMetric(float64(slices.Max(acks).Microseconds())/1000, "ms-slowest-ack")
	b.ReportMetric(float64(p99.Microseconds())/1000, "ms-healthz-p99")
	b.ReportMetric(float64(peakKB)/1024, "MB-peak-rss")
	b.Logf("%d slow connections from %d address(es): %d of 20 signed commands acked 200 within 3 s (codes %v; slowest %s); "+
		"/healthz p50 %s p99 %s max %s over %d probes; RSS %d -> peak %d MB; serve's CPU %.1f s in %s; the flood's answers: %s",
		n, len(from), ok, codes, slices.Max(acks).Round(time.Millisecond), lat[len(lat)/2], p99, lat[len(lat)-1], len(lat),
		before/1024, peakKB/1024, cpu, wall.Round(100*time.Millisecond), answers)
}

// floodProc is a slow flood run by a child process (floodMain).
type floodProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	started atomic.Int64
	lines   chan string // its lines after it stopped
}

// spawnFlood runs a slowFlood of n connections from the addresses from to
// addr in a child process, until stop.
func spawnFlood(b *testing.B, addr string, from []string, n int) *floodProc {
	raiseFileLimit(b, n+1024)
	f := &floodProc{cmd: exec.Command(os.Args[0], "-test.run=^$"), lines: make(chan string, 8)}
	f.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", floodEnv, addr, n, strings.Join(from, ",")))
	f.cmd.Stderr = os.Stderr
	var err error
	if f.stdin, err = f.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		defer close(f.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "started "); ok {
				s, _ := strconv.ParseInt(v, 10, 64)
				f.started.Store(s)
			} else {
				f.lines <- sc.Text()
			}
		}
	}()
	b.Cleanup(func() { f.cmd.Process.Kill(); f.cmd.Wait() })
	return f
}

// stop stops the flood and returns what it says of the server's answers.
func (f *floodProc) stop(b *testing.B) string {
	f.stdin.Close()
	var said []string
	for l := range f.lines {
		said = append(said, l)
	}
	if err := f.cmd.Wait(); err != nil {
		b.Fatalf("the flood process: %v", err)
	}
	return strings.Join(said, "; ")
}

// cpuSeconds is the CPU time pid has used, user and system, from /proc.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

// sampleRSS samples pid's RSS every 50 ms until the function it returns is
// called, which returns the peak in KB.
func sampleRSS(pid int) func() int64 {
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			if kb := int64(rssKB(pid)); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() int64 { close(stop); <-done; return peak.Load() }
}

// probeHealthz asks /healthz every 50 ms, on a kept-alive connection as a
// prober does, until stop; it returns each answer's latency (a failed
// probe counts as 10 s).
func probeHealthz(base string, stop <-chan struct{}) []time.Duration {
	client := &http.Client{Timeout: 10 * time.Second}
	var lat []time.Duration
	for {
		s := time.Now()
		resp, err := client.Get(base + "/healthz")
		d := time.Since(s)
		if err != nil || resp.StatusCode != http.StatusOK {
			d = 10 * time.Second
		}
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		lat = append(lat, d)
		select {
		case <-stop:
			return lat
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// timedSlash sends a signed `/opsbot help` from 127.0.0.1 and returns the
// answer's status (0: none) and how long it took.
func timedSlash(client *http.Client, base string) (int, time.Duration) {
	d := signedSlash(e2eSigningSecret, time.Now(), "/opsbot", "help")
	req, _ := http.NewRequest(http.MethodPost, base+slackad.EventsPath, strings.NewReader(d.body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", d.ts)
	req.Header.Set("X-Slack-Signature", d.sig)
	s := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Since(s)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(s)
}
