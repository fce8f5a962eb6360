package slack

import (
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
)

// TestTasksWaitForLateStarts: a task started while wait waits is waited for.
func TestTasksWaitForLateStarts(t *testing.T) {
	t.Parallel()
	var ts tasks
	first, second := make(chan struct{}), make(chan struct{})
	ts.Go(func() { <-first })
	waited := make(chan struct{})
	go func() { ts.wait(); close(waited) }()
	ts.Go(func() { <-second })
	close(first)
	testkit.WaitFor(t, 5*time.Second, "the first task to end", func() bool { return running(&ts) == 1 })
	select {
	case <-waited:
		t.Fatal("wait returned while a task ran")
	default:
	}
	close(second)
	<-waited
}

func running(ts *tasks) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.n
}
