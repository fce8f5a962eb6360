package serve

import (
	"log/slog"
	"net/http"
	"net/netip"
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
	// ReadTimeout bounds reading a request until its body is first read;
	// from then on the body's pace (MinBodyRate) bounds it.
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
	// MinBodyRate and BodyGrace: from its handler's first read, a request
	// body must have arrived at MinBodyRate bytes a second on average
	// after BodyGrace, or it is cut (408, too_slow). Slack's deliveries
	// come from Slack's servers in milliseconds: a slash command is under
	// 2 KB, an event a few KB, both inside the grace many times over; the
	// largest, a block_actions click of about 450 KiB, needs 64 KiB/s
	// (half a megabit) to arrive in 9 s. A body trickled a byte a second
	// is cut after BodyGrace.
	MinBodyRate = 64 << 10
	BodyGrace   = 2 * time.Second
	// One client address (an IPv4 address, an IPv6 /64; behind a proxy
	// listed in http.trusted_proxies, the one X-Forwarded-For names) reads
	// at most MaxClientBodies bodies at once. A request beyond them waits
	// for one of them to end, up to ClientWait, with at most
	// MaxClientWaiting waiting; past that it is answered 429 with
	// Retry-After (client_over_capacity). So one address cannot hold more
	// than a few pool slots, however many connections it opens.
	MaxClientBodies  = 16
	ClientWait       = time.Second
	MaxClientWaiting = 256
	// The request bodies read at the same time are capped in two pools, so
	// that large bodies held open cannot crowd out slash commands: small
	// ones (at most SmallBody by Content-Length: slash commands, events,
	// most clicks) up to MaxSmallBodies at once; larger ones (and those of
	// unknown length, counted as MaxBody) up to MaxLargeBodies and
	// MaxLargeBytes in all. The last SmallReserve and LargeReserve slots
	// of each pool go only to a client reading no other body, so that
	// clients reading many (a flood from a few addresses) leave room for
	// a newcomer, as each of Slack's many addresses is: filling the small
	// pool takes 1024 bodies from at least 184 addresses, each trickle cut
	// after BodyGrace. Beyond the pools a request is answered 503 with
	// Retry-After at once (over_capacity). This bounds what bodies being
	// read can hold: about 64 MiB at the very worst, far less in practice
	// (a body is only buffered as it arrives).
	SmallBody      = 64 << 10
	MaxSmallBodies = 1024
	SmallReserve   = 128
	MaxLargeBodies = 16
	LargeReserve   = 4
	MaxLargeBytes  = 8 << 20
)

// limits are the gate's and the pace's figures: the constants above, or
// smaller ones in tests.
type limits struct {
	clientBodies, clientWaiting int
	clientWait, grace           time.Duration
	rate                        int64
	small, smallReserve         int
	large, largeReserve         int
	largeBytes                  int64
}

var defaultLimits = limits{clientBodies: MaxClientBodies, clientWaiting: MaxClientWaiting, clientWait: ClientWait,
	grace: BodyGrace, rate: MinBodyRate, small: MaxSmallBodies, smallReserve: SmallReserve,
	large: MaxLargeBodies, largeReserve: LargeReserve, largeBytes: MaxLargeBytes}

// Rejects counts the requests the listener or a route refused before they
// reached the bot (bad signatures, stale timestamps, over-limit or too slow
// bodies) in opsbot_http_rejected_total{route,reason}, and logs them at
// most once a second with a count. They never reach the store. Safe for
// concurrent use.
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

// limitBodies wraps mux: a body over MaxBody by its Content-Length is
// refused 413 (too_large) before anything is read; any other body is read
// through a gatedBody, which admits it at the gate when its handler first
// reads it (a handler that refuses a request by its headers holds
// nothing) and keeps it to its pace. The client it counts against is
// clientOf(r, trusted).
func limitBodies(mux *http.ServeMux, gate *bodyGate, trusted []netip.Prefix, rej *Rejects) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			mux.ServeHTTP(w, r)
			return
		}
		route := routeOf(mux, r)
		if r.ContentLength > MaxBody {
			rej.Reject(route, "too_large")
			w.Header().Set("Connection", "close") // answered at once, the body unread
			http.Error(w, "request body over "+strconv.Itoa(MaxBody)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		body := r.Body
		gb := newGatedBody(r, w, gate, clientOf(r, trusted), func(reason string) { rej.Reject(route, reason) })
		r.Body = gb
		defer func() {
			gb.release()
			r.Body = body // so that net/http sees the body it gave, and whether it was closed early
		}()
		mux.ServeHTTP(gb.w, r)
	})
}
