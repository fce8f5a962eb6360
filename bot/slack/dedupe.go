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

// tasks tracks the goroutines the adapter starts besides Run's own (answers
// sent after an ack, held edits), so that Run returns only after them.
// Unlike a sync.WaitGroup, a task may start while wait waits (a click
// answered as Run stops). Safe for concurrent use.
type tasks struct {
	mu   sync.Mutex
	n    int
	zero chan struct{}
}

// add counts a task that done will end.
func (t *tasks) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tasks) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n--; t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
}

// Go runs f as a task.
func (t *tasks) Go(f func()) {
	t.add()
	go func() {
		defer t.done()
		f()
	}()
}

// wait returns once no task runs.
func (t *tasks) wait() {
	for {
		t.mu.Lock()
		if t.n == 0 {
			t.mu.Unlock()
			return
		}
		if t.zero == nil {
			t.zero = make(chan struct{})
		}
		z := t.zero
		t.mu.Unlock()
		<-z
	}
}
