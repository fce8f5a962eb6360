package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
// 100 ms, the signed command acked 200 within 3 s.
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
		open := func() net.Conn {
			c, err := net.Dial("tcp", addr)
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
