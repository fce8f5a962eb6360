package testkit

import (
	"sync/atomic"
	"time"
)

// Clock is a clock a test moves by hand, for code that takes its time from
// an injected func() time.Time (pass c.Now). It reads only what Set and Add
// put there: it never advances by itself. It is safe for concurrent use;
// make one with NewClock (a zero Clock's Now panics: it holds no time).
type Clock struct{ t atomic.Pointer[time.Time] }

// NewClock returns a Clock that reads t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Set makes c read t from now on.
func (c *Clock) Set(t time.Time) { c.t.Store(&t) }

// Now returns the time c was last set to (or moved to by Add).
func (c *Clock) Now() time.Time { return *c.t.Load() }

// Add moves c by d (back when d is negative). A Set or Add racing with it
// may be lost: tests move a clock from one goroutine.
func (c *Clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }
