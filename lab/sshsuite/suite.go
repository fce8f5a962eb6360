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
	t.Run("AwkwardArgs", func(t *testing.T) {
		r := dial(t)
		// Each word must arrive as exactly one argument, byte for byte.
		words := []string{"a b", "  two  spaces  ", "it's", `"dq"`, "'sq'", "$HOME", "${PATH}", "`id`",
			"$(id)", "line1\nline2", "", "tab\tx", "ünïcødé ✓ 日本", "*", "?", "[a]", ";", "|", "&", ">out",
			"<in", "#hash", "~", "~root", "a=b", "(", ")", "{", "}", "!", "--", "back\\slash", "\\n"}
		// printf '%s\n' prints every word on its own line where the host has printf.
		out, _, code, err := r.Run(ctx(t), nil, append([]string{"printf", "%s\n"}, words...)...)
		switch {
		case err != nil:
			t.Fatalf("printf: %v", err)
		case code == 127:
			t.Logf("no printf on this host: checked with echo and test only")
		default:
			want := strings.Join(words, "\n") + "\n"
			if code != 0 || string(out) != want {
				t.Fatalf("printf '%%s\\n' WORDS: code %d\n got %q\nwant %q", code, out, want)
			}
		}
		// echo joins its arguments with one space; the empty word shows as a doubled space.
		// (No backslashes here: some echos interpret them.)
		var plain []string
		for _, w := range words {
			if !strings.Contains(w, "\\") && w != "--" {
				plain = append(plain, w)
			}
		}
		out, _, code, err = r.Run(ctx(t), nil, append([]string{"echo", "x"}, plain...)...)
		if want := "x " + strings.Join(plain, " ") + "\n"; err != nil || code != 0 || string(out) != want {
			t.Fatalf("echo x WORDS: code %d err %v\n got %q\nwant %q", code, err, out, want)
		}
		// test W = W succeeds only when W arrives as one argument (split or lost words make it
		// fail), and test W = W2 fails when W arrives intact. "!" is left out: the lab's test
		// takes a leading "!" as negation even with three arguments.
		for _, w := range words {
			if w == "!" {
				continue
			}
			if _, _, code, err := r.Run(ctx(t), nil, "test", w, "=", w); err != nil || code != 0 {
				t.Fatalf("test %q = %q: code %d err %v, want 0", w, w, code, err)
			}
			if _, _, code, err := r.Run(ctx(t), nil, "test", w, "=", w+"x"); err != nil || code != 1 {
				t.Fatalf("test %q = %q: code %d err %v, want 1", w, w+"x", code, err)
			}
		}
	})
	t.Run("Stdin", func(t *testing.T) {
		r := dial(t)
		in := []byte("line one\n\x00binary\xff\nno newline at end")
		out, _, code, err := r.Run(ctx(t), in, "cat")
		if err != nil || code != 0 || !bytes.Equal(out, in) {
			t.Fatalf("cat with stdin: out %q code %d err %v, want %q", out, code, err, in)
		}
		// nil stdin: the command sees end of input at once.
		out, _, code, err = r.Run(ctx(t), nil, "cat")
		if err != nil || code != 0 || len(out) != 0 {
			t.Fatalf("cat without stdin: out %q code %d err %v, want empty", out, code, err)
		}
	})
	t.Run("LargeStdinAndOutput", func(t *testing.T) {
		in := bytes.Repeat([]byte("0123456789abcdef\n"), 4<<20/17)
		out, _, code, err := dial(t).Run(ctx(t), in, "cat")
		if err != nil || code != 0 || !bytes.Equal(out, in) {
			t.Fatalf("cat 4 MiB: %d bytes back (want %d), code %d, err %v", len(out), len(in), code, err)
		}
	})
	t.Run("CancelWithin2s", func(t *testing.T) {
		r := dial(t)
		c, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := make(chan time.Time, 1)
		done := make(chan error, 1)
		go func() {
			_, _, _, err := r.Run(c, nil, "sleep", "30")
			done <- err
		}()
		// Cancel once the command is surely running on the other side.
		time.AfterFunc(300*time.Millisecond, func() { started <- time.Now(); cancel() })
		select {
		case err := <-done:
			at := <-started
			if d := time.Since(at); d > 2*time.Second {
				t.Fatalf("sleep 30 returned %v after cancel, want within 2s", d)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled sleep 30: err %v, want one wrapping context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("cancelled sleep 30 did not return within 5s")
		}
	})
	t.Run("DeadlineExceeded", func(t *testing.T) {
		c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, _, err := dial(t).Run(c, nil, "sleep", "30")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("sleep 30 past deadline: err %v, want one wrapping context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2300*time.Millisecond {
			t.Fatalf("sleep 30 past a 300ms deadline returned after %v", d)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		r := dial(t)
		const n = 8
		errs := make(chan error, n)
		for i := range n {
			go func() {
				want := fmt.Sprintf("run %d\n", i)
				out, _, code, err := r.Run(ctx(t), nil, "echo", "run", fmt.Sprint(i))
				if err == nil && (code != 0 || string(out) != want) {
					err = fmt.Errorf("echo run %d: out %q code %d", i, out, code)
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}
