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

// TestBodiesLimited: a body over MaxBody is refused 413 before it is read;
// past MaxLargeBodies large bodies being read at once, the next large one is
// answered 503 with Retry-After at once, while a small one (a slash command)
// still goes through; each refusal is counted by route and reason, and
// logged once for the second with its count; a large body goes through
// again once the others are done.
func TestBodiesLimited(t *testing.T) {
	m := NewMetrics(BuildInfo("v", "r"), func() []remote.HostState { return nil })
	var logged bytes.Buffer
	var logMu sync.Mutex
	rej := NewRejects(m, slog.New(slog.NewTextHandler(lockedWriter{&logged, &logMu}, nil)))
	release := make(chan struct{})
	inside := make(chan struct{}, MaxLargeBodies+1)
	h, err := Handler(Options{Metrics: m, Rejects: rej, Routes: map[string]http.Handler{
		"POST /slack/events": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inside <- struct{}{}
			<-release // holds its body slot, as a slow body does
			io.Copy(io.Discard, r.Body)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(body io.Reader, size int64) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/slack/events", body)
		req.ContentLength = size
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
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
	large := strings.Repeat("x", SmallBody+1)
	var wg sync.WaitGroup
	for range MaxLargeBodies {
		wg.Go(func() { post(strings.NewReader(large), int64(len(large))) })
	}
	for range MaxLargeBodies {
		<-inside
	}
	resp := post(strings.NewReader(large), int64(len(large)))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("past MaxLargeBodies: %d, Retry-After %q; want 503 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	small := make(chan int, 1)
	go func() { small <- post(strings.NewReader("{}"), 2).StatusCode }()
	<-inside // the small one is in, beside the large ones held
	close(release)
	if code := <-small; code != http.StatusOK {
		t.Fatalf("a small body while the large pool is full: %d", code)
	}
	wg.Wait()
	go func() { <-inside }()
	if resp := post(strings.NewReader(large), int64(len(large))); resp.StatusCode != http.StatusOK {
		t.Fatalf("once the others were read: %d", resp.StatusCode)
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

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
