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
	// The request bodies read at the same time are capped in two pools, so
	// that large bodies held open cannot crowd out slash commands: small
	// ones (at most SmallBody by Content-Length: slash commands, events,
	// most clicks) up to MaxSmallBodies at once; larger ones (and those of
	// unknown length, counted as MaxBody) up to MaxLargeBodies and
	// MaxLargeBytes in all. Beyond them a request is answered 503 with
	// Retry-After at once. With ReadTimeout, this bounds what held-open
	// bodies can hold: about 64 MiB at the very worst, far less in practice
	// (a body is only buffered as it arrives).
	SmallBody      = 64 << 10
	MaxSmallBodies = 1024
	MaxLargeBodies = 16
	MaxLargeBytes  = 8 << 20
)

// bodyGate admits the request bodies read at the same time, within the
// small and large pools.
type bodyGate struct {
	mu     sync.Mutex
	small  int
	large  int
	lbytes int64
}

func (g *bodyGate) take(size int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if size <= SmallBody {
		if g.small+1 > MaxSmallBodies {
			return false
		}
		g.small++
		return true
	}
	if g.large+1 > MaxLargeBodies || g.lbytes+size > MaxLargeBytes {
		return false
	}
	g.large++
	g.lbytes += size
	return true
}

func (g *bodyGate) give(size int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if size <= SmallBody {
		g.small--
		return
	}
	g.large--
	g.lbytes -= size
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
