package slack

import (
	"sync"
	"time"
)

// dedupeWindow is how long a delivery's key is remembered: longer than the
// 5 minutes a signed timestamp is accepted, and than Slack's retries.
const dedupeWindow = 10 * time.Minute

// dedupe remembers the keys of deliveries seen in the last window, so a
// retried or replayed delivery is recognised. Safe for concurrent use.
type dedupe struct {
	window time.Duration
	mu     sync.Mutex
	seen   map[string]time.Time
	swept  time.Time
}

func newDedupe(window time.Duration) *dedupe {
	return &dedupe{window: window, seen: map[string]time.Time{}}
}

// first records key at now and reports whether it was not seen within the
// window. An empty key is never a duplicate.
func (d *dedupe) first(key string, now time.Time) bool {
	if key == "" {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.swept) > d.window {
		for k, at := range d.seen {
			if now.Sub(at) > d.window {
				delete(d.seen, k)
			}
		}
		d.swept = now
	}
	if at, ok := d.seen[key]; ok && now.Sub(at) <= d.window {
		return false
	}
	d.seen[key] = now
	return true
}
