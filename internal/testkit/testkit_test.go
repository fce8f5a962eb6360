package testkit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollReturnsOnceCondHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	start := time.Now()
	if !Poll(10*time.Second, func() bool { return calls.Add(1) == 3 }) {
		t.Fatal("Poll gave up on a condition that held")
	}
	if calls.Load() != 3 {
		t.Errorf("cond called %d times, want 3 (stop at the first true)", calls.Load())
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("took %v for a condition true at the third call", el)
	}
}

func TestPollGivesUpAtTheDeadline(t *testing.T) {
	t.Parallel()
	var last time.Time
	start := time.Now()
	d := 50 * time.Millisecond
	if Poll(d, func() bool { last = time.Now(); return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if last.Sub(start) < d {
		t.Errorf("last call %v after the start, before the deadline %v", last.Sub(start), d)
	}
	if el := time.Since(start); el > d+time.Second {
		t.Errorf("returned %v after a deadline of %v", el, d)
	}
}

// recorder is a testing.TB that records what failing calls say.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	fatal  string
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(r) // stands for runtime.Goexit: the rest of the helper must not run
}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// failing runs fn with a recorder and returns what it recorded.
func failing(t *testing.T, fn func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		fn(r)
	}()
	return r
}

func TestWaitForFailsWithWhat(t *testing.T) {
	t.Parallel()
	r := failing(t, func(tb testing.TB) {
		WaitFor(tb, 20*time.Millisecond, "the moon", func() bool { return false })
	})
	if r.fatal != "timed out after 20ms waiting for the moon" {
		t.Errorf("WaitFor failed with %q", r.fatal)
	}
	r = failing(t, func(tb testing.TB) { WaitFor(tb, time.Second, "nothing", func() bool { return true }) })
	if r.fatal != "" {
		t.Errorf("WaitFor failed on a condition that held: %q", r.fatal)
	}
}

func TestContextEndsAtTheDeadlineOrCleanup(t *testing.T) {
	t.Parallel()
	ctx := Context(t, 10*time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context outlived its deadline")
	}
	var inner, outer = make(chan error, 1), make(chan error, 1)
	t.Run("sub", func(t *testing.T) {
		ctx := Context(t, time.Hour)
		t.Cleanup(func() { inner <- ctx.Err() }) // registered later: runs first
		go func() { <-ctx.Done(); outer <- ctx.Err() }()
	})
	if err := <-inner; err != nil {
		t.Errorf("the context ended before a later cleanup ran: %v", err)
	}
	if err := <-outer; err == nil {
		t.Error("the context did not end with the test")
	}
}

func TestGoldenComparesAndUpdates(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll(filepath.Join("testdata", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "sub", "a.golden"), []byte("same\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := failing(t, func(tb testing.TB) { Golden(tb, "sub/a.golden", "same\n") }); r.fatal != "" || len(r.errors) > 0 {
		t.Errorf("equal content reported: %q %q", r.fatal, r.errors)
	}
	r := failing(t, func(tb testing.TB) { Golden(tb, "sub/a.golden", "other\n") })
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "--- got\nother\n\n--- want\nsame\n") {
		t.Errorf("a difference reported as %q", r.errors)
	}
	if r := failing(t, func(tb testing.TB) { Golden(tb, "missing.golden", "x") }); !strings.Contains(r.fatal, "-update") {
		t.Errorf("a missing golden file reported as %q", r.fatal)
	}

	if r := failing(t, func(tb testing.TB) { golden(tb, "new/dir/b.golden", "fresh\n", true) }); r.fatal != "" || len(r.errors) > 0 {
		t.Fatalf("update failed: %q %q", r.fatal, r.errors)
	}
	if b, err := os.ReadFile(filepath.Join("testdata", "new", "dir", "b.golden")); err != nil || string(b) != "fresh\n" {
		t.Errorf("-update wrote %q, %v", b, err)
	}
}

func TestLoggerDropsRecordsOnceTheTestEnds(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := &testWriter{out: &buf}
	fmt.Fprintln(w, "while the test runs")
	w.end()
	fmt.Fprintln(w, "after the test ended") // the testing package panics on this once every parent ended
	if buf.String() != "while the test runs\n" {
		t.Errorf("wrote %q", buf.String())
	}

	var log func(string)
	t.Run("sub", func(t *testing.T) {
		l := Logger(t)
		l.Info("while the subtest runs")
		l.Debug("not shown unless " + LogEnv + " is set")
		log = func(msg string) { l.Info(msg) }
	})
	log("after the subtest ended")
}

func TestClockReadsWhatItWasSetTo(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	c := NewClock(t0)
	now := c.Now // as code under test holds it
	if got := now(); !got.Equal(t0) {
		t.Fatalf("a new clock reads %v, want %v", got, t0)
	}
	time.Sleep(time.Millisecond)
	if got := now(); !got.Equal(t0) {
		t.Fatalf("the clock moved by itself to %v", got)
	}
	c.Add(time.Hour)
	if got := now(); !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after Add(1h) it reads %v", got)
	}
	c.Set(t0)
	if got := now(); !got.Equal(t0) {
		t.Fatalf("after Set it reads %v", got)
	}
}
