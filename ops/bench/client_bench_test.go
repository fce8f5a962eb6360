package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const helperEnv = "OPSBOT_BENCH_SSE_SERVER"

// TestHelperSSEServer is not a test: run with OPSBOT_BENCH_SSE_SERVER=INTERVAL
// it is the fast SSE server of BenchmarkClient512Streams, in its own process
// so that the client's CPU can be measured alone; with OPSBOT_BENCH_SSE_SERVER=lab
// it serves the lab's engine (labPhysics, speculation on) instead. It prints its
// address and serves until stdin closes.
func TestHelperSSEServer(t *testing.T) {
	t.Parallel()
	iv := os.Getenv(helperEnv)
	if iv == "" {
		t.Skip("helper process for BenchmarkClient512Streams")
	}
	var h http.Handler
	if iv == "lab" {
		eng, _ := startLab(t, nil, "--max-running-requests", "512")
		h = eng.Handler()
	} else {
		interval, err := time.ParseDuration(iv)
		if err != nil {
			t.Fatal(err)
		}
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sseChunks(w, r, interval) })
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	fmt.Println(ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

// sseChunks streams max_tokens chunks of SGLang's shape, one flush each, one
// every interval (0 = as fast as possible).
func sseChunks(w http.ResponseWriter, r *http.Request, interval time.Duration) {
	if r.URL.Path == "/v1/models" {
		io.WriteString(w, `{"data":[{"id":"m"}]}`)
		return
	}
	var req struct {
		MaxTokens int `json:"max_tokens"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	bw := bufio.NewWriterSize(w, 4096)
	chunk := []byte(`data: {"id":"cmpl-5f3a","object":"text_completion","created":1721574013,"model":"m","choices":[{"index":0,"text":" token","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}` + "\n\n")
	var tk *time.Ticker
	if interval > 0 {
		tk = time.NewTicker(interval)
		defer tk.Stop()
	}
	for i := 0; i < req.MaxTokens; i++ {
		if tk != nil {
			select {
			case <-tk.C:
			case <-r.Context().Done():
				return
			}
		}
		bw.Write(chunk)
		if tk != nil || i%8 == 7 {
			bw.Flush()
			fl.Flush()
		}
	}
	fmt.Fprintf(bw, "data: {\"id\":\"cmpl-5f3a\",\"choices\":[],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", req.MaxTokens, req.MaxTokens+16)
	bw.Flush()
}

func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuOf reads a process's user+system CPU from /proc (Linux); -1 if unknown.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return -1
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ is 100 on Linux
}

// startHelper starts the SSE server process and returns its base URL.
func startHelper(b *testing.B, iv time.Duration) string { return startHelperMode(b, iv.String()) }

// startHelperMode starts the helper server process in mode (an interval or "lab").
func startHelperMode(b *testing.B, mode string) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSSEServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("helper server: %v", err)
	}
	helperPID = cmd.Process.Pid
	return "http://" + strings.TrimSpace(addr)
}

var helperPID int

// BenchmarkClient512Streams: 512 concurrent streams of 200 chunks from a
// server in another process; reports the client's CPU-seconds per million
// chunks (the goal is <= 3), the server's, and chunks/s.
func BenchmarkClient512Streams(b *testing.B) {
	for _, iv := range []time.Duration{10 * time.Millisecond, 0} {
		name := "paced" + iv.String()
		if iv == 0 {
			name = "burst"
		}
		b.Run(name, func(b *testing.B) {
			url := startHelper(b, iv)
			pid := helperPID
			const streams, chunks = 512, 200
			o := Options{URL: url, Model: "", Prompts: streams, Concurrency: streams, InputLen: 16, OutputLen: chunks, Timeout: time.Minute}
			o.HTTP = NewHTTPClient(streams)
			if _, err := Run(context.Background(), o); err != nil { // connections up
				b.Fatal(err)
			}
			b.ResetTimer()
			c0, s0, t0 := cpuSelf(), cpuOf(pid), time.Now()
			total := 0
			for i := 0; i < b.N; i++ {
				res, err := Run(context.Background(), o)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res.Requests {
					total += r.Chunks
				}
			}
			wall := time.Since(t0)
			c1, s1 := cpuSelf(), cpuOf(pid)
			b.StopTimer()
			m := float64(total) / 1e6
			b.ReportMetric((c1-c0).Seconds()/m, "client-cpu-s/Mchunk")
			if s0 >= 0 && s1 >= 0 {
				b.ReportMetric((s1-s0).Seconds()/m, "server-cpu-s/Mchunk")
			}
			b.ReportMetric(float64(total)/wall.Seconds(), "chunks/s")
		})
	}
}

// BenchmarkRawTCPFloor512Streams is the floor BenchmarkClient512Streams is
// measured against: the same paced streams read with bare conn.Read calls
// (no HTTP, no SSE parsing), so the difference is the client's own cost.
func BenchmarkRawTCPFloor512Streams(b *testing.B) {
	url := startHelper(b, 10*time.Millisecond)
	addr := strings.TrimPrefix(url, "http://")
	const streams, chunks = 512, 200
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		addr, len(`{"max_tokens":200}`), `{"max_tokens":200}`)
	one := func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		buf := make([]byte, 16<<10)
		var tail []byte
		for {
			n, err := c.Read(buf)
			tail = append(tail[:0], buf[max(0, n-32):n]...)
			if strings.Contains(string(tail), "[DONE]") {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	b.ResetTimer()
	c0, s0, t0 := cpuSelf(), cpuOf(helperPID), time.Now()
	for i := 0; i < b.N; i++ {
		errs := make(chan error, streams)
		for k := 0; k < streams; k++ {
			go func() { errs <- one() }()
		}
		for k := 0; k < streams; k++ {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	wall := time.Since(t0)
	c1, s1 := cpuSelf(), cpuOf(helperPID)
	m := float64(b.N*streams*chunks) / 1e6
	b.ReportMetric((c1-c0).Seconds()/m, "client-cpu-s/Mchunk")
	b.ReportMetric((s1-s0).Seconds()/m, "server-cpu-s/Mchunk")
	b.ReportMetric(float64(b.N*streams*chunks)/wall.Seconds(), "chunks/s")
}

// bareRead streams one response like a client that does nothing but read: a new
// connection, the request written by hand, conn.Read until [DONE] (no HTTP parsing, no
// SSE parsing, no timing).
func bareRead(addr, body string) error {
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	buf := make([]byte, 16<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		tail = append(tail[:0], buf[max(0, n-32):n]...)
		if strings.Contains(string(tail), "[DONE]") {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// BenchmarkClientVsBareRead measures, in the same run and side by side, the client's CPU
// and a bare streaming read's CPU (bareRead: the floor any client pays for the same bytes)
// for the same responses: paced streams of one token per chunk from a server in another
// process, at concurrency 1, 8 and 64: "paced" sends one token per chunk every 5 ms,
// "lab" is the lab's engine (one chunk of about 3.5 tokens per verify step). It reports both
// per 1,000 output tokens and their ratio (the goal is at most 2). Each iteration runs the
// client and then the bare read, so that both see the same machine.
func BenchmarkClientVsBareRead(b *testing.B) {
	for _, server := range []string{"paced", "lab"} {
		b.Run(server, func(b *testing.B) { benchClientVsBare(b, server) })
	}
}

func benchClientVsBare(b *testing.B, server string) {
	const chunks = 64
	mode := "5ms"
	if server == "lab" {
		mode = "lab"
	}
	url := startHelperMode(b, mode)
	addr := strings.TrimPrefix(url, "http://")
	body := fmt.Sprintf(`{"model":"m","prompt":[1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,1013,1014,1015,1016],"max_tokens":%d,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, chunks)
	for _, conc := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("concurrency-%d", conc), func(b *testing.B) {
			prompts := max(8, 2*conc)
			o := Options{URL: url, Model: "m", Prompts: prompts, Concurrency: conc, InputLen: 16, OutputLen: chunks, Timeout: time.Minute,
				HTTP: NewHTTPClient(conc)}
			if _, err := Run(context.Background(), o); err != nil { // connections up
				b.Fatal(err)
			}
			var client, bare time.Duration
			tokens := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c0 := cpuSelf()
				res, err := Run(context.Background(), o)
				if err != nil {
					b.Fatal(err)
				}
				client += cpuSelf() - c0
				tokens += res.OutputTokens
				c0 = cpuSelf()
				jobs := make(chan int, prompts)
				for k := range prompts {
					jobs <- k
				}
				close(jobs)
				errs := make(chan error, conc)
				for range conc {
					go func() {
						for range jobs {
							if err := bareRead(addr, body); err != nil {
								errs <- err
								return
							}
						}
						errs <- nil
					}()
				}
				for range conc {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				bare += cpuSelf() - c0
			}
			b.StopTimer()
			k := float64(tokens) / 1000
			b.ReportMetric(ms(client)/k, "client-cpu-ms/1ktok")
			b.ReportMetric(ms(bare)/k, "bare-cpu-ms/1ktok")
			b.ReportMetric(float64(client)/float64(bare), "client/bare")
		})
	}
}
