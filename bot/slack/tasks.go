package slack

import "sync"

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
