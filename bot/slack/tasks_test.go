package slack

import (
	"testing"
	"time"
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
	deadline := time.Now().Add(5 * time.Second)
	for running(&ts) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first task never ended")
		}
		time.Sleep(time.Millisecond)
	}
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
