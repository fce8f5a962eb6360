package serve

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Reasons the gate refuses a body, as opsbot_http_rejected_total counts them.
const (
	reasonClientBusy = "client_over_capacity" // its client reads lim.clientBodies already, and too many wait
	reasonPoolFull   = "over_capacity"        // the pool its size falls in is full
)

// bodyGate admits the request bodies read at the same time: each client
// reads at most lim.clientBodies at once (more wait their turn, a while),
// and all of them fit the small and large pools, whose last slots go only
// to a client reading nothing else. Safe for concurrent use.
type bodyGate struct {
	lim *limits

	mu      sync.Mutex
	small   int
	large   int
	lbytes  int64
	clients map[netip.Prefix]*clientReads
}

// clientReads are one client's bodies being read, and the requests waiting
// to read theirs. While any wait, reading is lim.clientBodies: a slot that
// frees passes to the oldest waiting.
type clientReads struct {
	reading int
	queue   []chan struct{} // closed when handed a slot; oldest first
}

func newBodyGate(lim *limits) *bodyGate {
	return &bodyGate{lim: lim, clients: map[netip.Prefix]*clientReads{}}
}

// admit takes a slot of client's (waiting for one, up to lim.clientWait or
// until ctx ends) and a pool slot for a body of size bytes. It returns ""
// when admitted, then doneReading(client) must follow once the body is
// read and give(size) once its request is done; else the reason it
// refused, and nothing is held.
func (g *bodyGate) admit(ctx context.Context, client netip.Prefix, size int64) string {
	if !g.enter(ctx, client) {
		return reasonClientBusy
	}
	if !g.take(client, size) {
		g.doneReading(client)
		return reasonPoolFull
	}
	return ""
}

// enter takes one of client's slots, waiting its turn if it has none free.
func (g *bodyGate) enter(ctx context.Context, client netip.Prefix) bool {
	g.mu.Lock()
	c := g.clients[client]
	if c == nil {
		c = &clientReads{}
		g.clients[client] = c
	}
	if c.reading < g.lim.clientBodies {
		c.reading++
		g.mu.Unlock()
		return true
	}
	if len(c.queue) >= g.lim.clientWaiting {
		g.mu.Unlock()
		return false
	}
	turn := make(chan struct{})
	c.queue = append(c.queue, turn)
	g.mu.Unlock()
	t := time.NewTimer(g.lim.clientWait)
	defer t.Stop()
	select {
	case <-turn:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-turn: // handed a slot as the wait ended
		return true
	default:
	}
	c.queue = slices.DeleteFunc(c.queue, func(q chan struct{}) bool { return q == turn })
	return false
}

// doneReading gives back one of client's slots: to the oldest waiting, or
// to no one.
func (g *bodyGate) doneReading(client netip.Prefix) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.clients[client]
	if len(c.queue) > 0 {
		close(c.queue[0])
		c.queue = c.queue[1:]
		return
	}
	if c.reading--; c.reading == 0 {
		delete(g.clients, client)
	}
}

// take takes a pool slot for a body of size bytes read by client (which
// holds a slot of its own for it already): none of the last reserved ones
// when client reads other bodies too.
func (g *bodyGate) take(client netip.Prefix, size int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	alone := g.clients[client].reading == 1
	if size <= SmallBody {
		free := g.lim.small - g.small
		if free <= 0 || (free <= g.lim.smallReserve && !alone) {
			return false
		}
		g.small++
		return true
	}
	free := g.lim.large - g.large
	if free <= 0 || (free <= g.lim.largeReserve && !alone) || g.lbytes+size > g.lim.largeBytes {
		return false
	}
	g.large++
	g.lbytes += size
	return true
}

// give gives back the pool slot of a body of size bytes.
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
