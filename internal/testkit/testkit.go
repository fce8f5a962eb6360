// Package testkit holds the helpers opsbot's tests share, so that each is
// written once: waiting for a condition with a deadline (Poll, WaitFor), a
// context that ends with the test (Context), golden files under testdata/
// refreshed with -update (Golden), a logger that writes into the test's
// output (Logger), and a clock the test moves by hand (Clock).
//
// It is for test files only (internal/arch holds to that): importing it
// defines the -update flag in the binary. It imports nothing of ours, so
// that any package's tests may use it, lab's included. How a test binary
// runs (parallelism, long tests) is internal/testrun's; reading the
// buttons of a posted Slack message is internal/slackfake's (Buttons), so
// that this package imports no Slack library. The doubles that speak our
// types live in small test-only packages of their own: a recording chat
// (internal/chatrec), job backends made of a function (internal/jobtest),
// Apps built for a test (internal/apptest).
package testkit

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The pauses between two calls of a polled condition: the first is
// minPoll, each next one twice the last, up to maxPoll. A condition that
// holds soon is seen within about a millisecond; one that takes long, or is
// itself slow to check (an SSH round trip, a query), is checked at most
// every maxPoll instead of keeping a CPU busy.
const (
	minPoll = time.Millisecond
	maxPoll = 10 * time.Millisecond
)

// Poll calls cond until it returns true or d has passed, and reports
// whether it did. cond is called at once, then after each pause (see
// minPoll), and once more when d has passed, never later: false means cond
// was false at its last call, made at or after the deadline. It sleeps only
// between calls and may be called from any goroutine; for a test that fails
// on the timeout, use WaitFor.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := minPoll
	for !cond() {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxPoll)
	}
	return true
}

// WaitFor polls cond as Poll does until it holds and returns; if it still
// does not hold once d has passed, it fails t with "timed out after D
// waiting for WHAT" and ends the test (t.Fatalf), so it must be called from
// the test's goroutine. what says what is awaited: "the adapter to be
// ready".
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Context returns a context that ends d from now or when t's cleanup cancels
// it, whichever comes first. It is not t.Context: it stays live through the
// cleanups registered after this call (they run first), so they may use it
// to shut down what the test started.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// update is the one -update flag of a test binary (go test ./pkg/ -update):
// defined here, once, it rewrites the golden files of every Golden call.
var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the tests got")

// Golden compares got with the golden file testdata/NAME of the package
// under test (name may hold slashes: "edit/drop-in.diff"). A difference is
// reported with t.Errorf, showing both, and the test goes on; a missing or
// unreadable golden file ends the test (t.Fatalf). Under -update it writes
// got to the file instead, creating its directories, and compares nothing.
func Golden(t testing.TB, name, got string) {
	t.Helper()
	golden(t, name, got, *update)
}

// golden is Golden, rewriting the file when update is true.
func golden(t testing.TB, name, got string, update bool) {
	t.Helper()
	path := filepath.Join("testdata", filepath.FromSlash(name))
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file: %v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run go test -update if the change is meant):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// LogEnv names the environment variable that, set to anything, lowers
// Logger's level from Info to Debug.
const LogEnv = "OPSBOT_TEST_LOG"

// Logger returns a logger that writes each record as text into t's output
// (t.Output), which go test shows for a failed test or under -v: records
// at Info and above, or at Debug and above when LogEnv is set. It is safe
// for concurrent use, from any goroutine, for as long as anything holds it:
// records logged once t's cleanup has reached this call's turn (cleanups
// run last registered first, so after the ones registered later) are
// dropped, since the testing package forbids writing to a test that has
// ended.
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv(LogEnv) != "" {
		level = slog.LevelDebug
	}
	w := &testWriter{out: t.Output()}
	t.Cleanup(w.end)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// testWriter writes into a test's output until end is called, and drops
// what comes after.
type testWriter struct {
	mu    sync.Mutex
	out   io.Writer
	ended bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return len(p), nil
	}
	return w.out.Write(p)
}

func (w *testWriter) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
}
