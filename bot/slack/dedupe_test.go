package slack

import (
	"testing"
	"time"
)

// TestDedupeWindow: a key is a duplicate within the window, new after it.
func TestDedupeWindow(t *testing.T) {
	d := newDedupe(time.Minute)
	now := time.Unix(1700000000, 0)
	if !d.first("a", now) || d.first("a", now.Add(59*time.Second)) || !d.first("b", now) {
		t.Fatal("within the window")
	}
	if !d.first("a", now.Add(2*time.Minute)) || !d.first("", now) || !d.first("", now) {
		t.Fatal("after the window, or an empty key")
	}
}

// TestTasksWaitForLateStarts: a task started while wait waits is waited for.
func TestTasksWaitForLateStarts(t *testing.T) {
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
