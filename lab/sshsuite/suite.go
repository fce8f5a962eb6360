// Package sshsuite is a behaviour suite for anything that runs commands over SSH: the lab's
// simulated hosts and a real OpenSSH sshd must both pass it. It imports nothing of opsbot; the
// caller adapts its client to the small Runner interface.
package sshsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Runner runs argv on a remote host. The Runner quotes argv for the remote shell. A non-zero
// exit status is not an error: err is for transport failures and for ctx ending, in which case
// it must wrap ctx.Err() and Run must return promptly.
type Runner interface {
	Run(ctx context.Context, stdin []byte, argv ...string) (stdout, stderr []byte, exit int, err error)
}

// Run runs the suite. dial returns a Runner on an established connection (it may be shared by
// subtests; the suite never closes it).
func Run(t *testing.T, dial func(t *testing.T) Runner) {
	t.Helper()
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return c
	}
	t.Run("ExitZero", func(t *testing.T) {
		out, _, code, err := dial(t).Run(ctx(t), nil, "true")
		if err != nil || code != 0 || len(out) != 0 {
			t.Fatalf("true: out %q code %d err %v, want empty, 0, nil", out, code, err)
		}
	})
	t.Run("Exit42", func(t *testing.T) {
		_, _, code, err := dial(t).Run(ctx(t), nil, "exit", "42")
		if err != nil || code != 42 {
			t.Fatalf("exit 42: code %d err %v, want 42", code, err)
		}
	})
	t.Run("False", func(t *testing.T) {
		_, _, code, err := dial(t).Run(ctx(t), nil, "false")
		if err != nil || code != 1 {
			t.Fatalf("false: code %d err %v, want 1", code, err)
		}
	})
	t.Run("NotFound127", func(t *testing.T) {
		_, stderr, code, err := dial(t).Run(ctx(t), nil, "opsbot-no-such-command-x9")
		if err != nil || code != 127 {
			t.Fatalf("unknown command: code %d err %v, want 127", code, err)
		}
		if !bytes.Contains(stderr, []byte("not found")) {
			t.Fatalf("unknown command: stderr %q lacks \"not found\"", stderr)
		}
	})
	t.Run("Quoting", func(t *testing.T) {
		words := []string{"echo", "a b", "it's", `"dq"`, "$HOME", "`x`", "back\\slash", ";", "|", "*"}
		out, _, code, err := dial(t).Run(ctx(t), nil, words...)
		want := strings.Join(words[1:], " ") + "\n"
		if err != nil || code != 0 || string(out) != want {
			t.Fatalf("echo: out %q code %d err %v, want %q", out, code, err, want)
		}
	})
	t.Run("StdinRoundTrip", func(t *testing.T) {
		in := make([]byte, 300<<10)
		for i := range in {
			in[i] = byte(i*7 + i/251)
		}
		out, _, code, err := dial(t).Run(ctx(t), in, "cat")
		if err != nil || code != 0 || !bytes.Equal(out, in) {
			t.Fatalf("cat: %d bytes back (want %d), code %d, err %v", len(out), len(in), code, err)
		}
	})
	t.Run("LargeOutput", func(t *testing.T) {
		out, _, code, err := dial(t).Run(ctx(t), nil, "seq", "1", "200000")
		if err != nil || code != 0 {
			t.Fatalf("seq: code %d err %v", code, err)
		}
		var want bytes.Buffer
		for i := 1; i <= 200000; i++ {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if !bytes.Equal(out, want.Bytes()) {
			t.Fatalf("seq 1 200000: got %d bytes, want %d (identical)", len(out), want.Len())
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		r := dial(t)
		c, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, _, _, err := r.Run(c, nil, "sleep", "30")
			done <- err
		}()
		time.AfterFunc(200*time.Millisecond, cancel)
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled sleep: err %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("cancelled sleep took %v", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("cancelled sleep 30 did not return within 10s")
		}
		// The connection is still usable afterwards.
		if _, _, code, err := r.Run(ctx(t), nil, "true"); err != nil || code != 0 {
			t.Fatalf("after cancel: code %d err %v", code, err)
		}
	})
	t.Run("Timeout124", func(t *testing.T) {
		start := time.Now()
		_, _, code, err := dial(t).Run(ctx(t), nil, "timeout", "0.2", "sleep", "30")
		if err != nil || code != 124 {
			t.Fatalf("timeout 0.2 sleep 30: code %d err %v, want 124", code, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("timeout took %v", d)
		}
	})
}
