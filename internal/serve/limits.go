package serve

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of opsbot's HTTP listener (http.listen), for every route. They are
// constants, not config: they follow from what the routes serve (Slack's
// deliveries, probes, a metrics scrape), not from a deployment.
const (
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, headers and body: a
	// client that trickles its body is cut off after it.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds writing a response (a metrics scrape is the
	// longest, well under it).
	WriteTimeout = 15 * time.Second
	// IdleTimeout closes a kept-alive connection idle this long.
	IdleTimeout = 60 * time.Second
	// MaxHeaderBytes bounds a request's headers; Slack's are under 2 KiB.
	MaxHeaderBytes = 16 << 10
	// MaxBody bounds one request's body. The largest Slack sends is a
	// block_actions interaction, which carries the message it came from:
	// up to 50 blocks of 3,000 characters, form-encoded (up to three bytes a
	// character), about 450 KiB.
	MaxBody = 512 << 10
	// MaxBodies and MaxBodyBytes cap the request bodies read at the same
	// time, in count and in bytes (by Content-Length, MaxBody when it is
	// unknown): beyond them a request is answered 503 with Retry-After at
	// once, so that held-open bodies cannot hold the process's memory.
	MaxBodies    = 64
	MaxBodyBytes = 8 << 20
)

// bodyGate admits the request bodies read at the same time, within
// MaxBodies and MaxBodyBytes.
type bodyGate struct {
	mu    sync.Mutex
	n     int
	bytes int64
}

func (g *bodyGate) take(size int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n+1 > MaxBodies || g.bytes+size > MaxBodyBytes {
		return false
	}
	g.n++
	g.bytes += size
	return true
}

func (g *bodyGate) give(size int64) {
	g.mu.Lock()
	g.n--
	g.bytes -= size
	g.mu.Unlock()
}

// Rejects counts the requests the listener or a route refused before they
// reached the bot (bad signatures, stale timestamps, over-limit bodies) in
// opsbot_http_rejected_total{route,reason}, and logs them at most once a
// second with a count. They never reach the store. Safe for concurrent use.
type Rejects struct {
	m   *Metrics
	log *slog.Logger

	mu      sync.Mutex
	pending map[[2]string]int
	timer   *time.Timer
}

// NewRejects returns a Rejects counting into m (nil: only logged).
func NewRejects(m *Metrics, log *slog.Logger) *Rejects {
	return &Rejects{m: m, log: log, pending: map[[2]string]int{}}
}

// Reject counts one request refused on route for reason.
func (r *Rejects) Reject(route, reason string) {
	if r == nil {
		return
	}
	if r.m != nil {
		r.m.rejected.WithLabelValues(route, reason).Inc()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[[2]string{route, reason}]++
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Second, r.flush)
	}
}

func (r *Rejects) flush() {
	r.mu.Lock()
	p := r.pending
	r.pending, r.timer = map[[2]string]int{}, nil
	r.mu.Unlock()
	for k, n := range p {
		r.log.Warn("refused HTTP requests", "route", k[0], "reason", k[1], "count", n, "within", time.Second)
	}
}

// routeOf is the path of the route r goes to ("other" for none), for labels
// whose values the routes bound.
func routeOf(mux *http.ServeMux, r *http.Request) string {
	_, pattern := mux.Handler(r)
	if pattern == "" {
		return "other"
	}
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		return pattern[i+1:]
	}
	return pattern
}

// limitBodies wraps mux: a request with a body is read only within the
// gate (else 503 with Retry-After: 1, counted as over_capacity), and never
// beyond MaxBody (413, counted as too_large, when Content-Length says so).
func limitBodies(mux *http.ServeMux, gate *bodyGate, rej *Rejects) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, route := mux, routeOf(mux, r)
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > MaxBody {
			rej.Reject(route, "too_large")
			w.Header().Set("Connection", "close") // answered at once, the body unread
			http.Error(w, "request body over "+strconv.Itoa(MaxBody)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		size := r.ContentLength
		if size < 0 {
			size = MaxBody
		}
		if !gate.take(size) {
			rej.Reject(route, "over_capacity")
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			http.Error(w, "too many requests being read: try again in a second", http.StatusServiceUnavailable)
			return
		}
		defer gate.give(size)
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		h.ServeHTTP(w, r)
	})
}
