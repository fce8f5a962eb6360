package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// cancelGrace bounds how long Run waits, after ctx ended and the command was signalled, for the
// session to wind down before returning anyway.
const cancelGrace = time.Second

// Run runs argv (the host's Prefix prepended, each word quoted by Quote) with stdin (nil =
// none) and returns its output. A non-zero exit is not an error: err is for transport failures
// and for ctx ending. On ctx end Run sends the remote command SIGKILL, closes the session and
// returns promptly an error wrapping ctx.Err(). When the cached connection is broken and opening
// the session fails (so nothing was sent), Run dials again once; when the connection breaks after
// the command was sent, the error wraps ErrOutcomeUnknown and the command is not sent again.
// Safe for concurrent use; concurrent Runs share the host's one connection.
func (h *Host) Run(ctx context.Context, stdin []byte, argv ...string) (Output, error) {
	return h.run(ctx, nil, stdin, argv)
}

// run is Run, checking hold (when set) right before each attempt to send.
func (h *Host) run(ctx context.Context, hold Hold, stdin []byte, argv []string) (Output, error) {
	words := append(append([]string(nil), h.cfg.Prefix...), argv...)
	what := fmt.Sprintf("run %s on %s", short(argv), h.cfg.Name)
	if len(argv) == 0 {
		return Output{}, fmt.Errorf("run on %s: empty command", h.cfg.Name)
	}
	for _, w := range words {
		if strings.IndexByte(w, 0) >= 0 {
			return Output{}, fmt.Errorf("%s: argument %q contains a NUL byte", what, w)
		}
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return Output{}, fmt.Errorf("%s: %w", what, err)
		}
		if err := checkHold(hold, what); err != nil {
			return Output{}, err
		}
		c, err := h.client(ctx)
		if err != nil {
			return Output{}, fmt.Errorf("%s: %w", what, err)
		}
		s, err := newSession(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return Output{}, fmt.Errorf("%s: open session: %w", what, ctx.Err())
			}
			h.forget(c)
			if attempt == 0 {
				h.p.log.Info("ssh session failed: reconnecting", "host", h.cfg.Name, "err", err)
				continue
			}
			return Output{}, fmt.Errorf("%s: open session: %w", what, err)
		}
		out, err := h.runSession(ctx, c, s, stdin, Quote(words))
		if err != nil {
			return out, fmt.Errorf("%s: %w", what, err)
		}
		return out, nil
	}
}

// newSession opens a session on c, giving up when ctx ends (a session that opens later is
// closed).
func newSession(ctx context.Context, c *conn) (*ssh.Session, error) {
	type result struct {
		s   *ssh.Session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := c.client.NewSession()
		ch <- result{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.s != nil {
				r.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

type startError struct{ err error }

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

func (h *Host) runSession(ctx context.Context, c *conn, s *ssh.Session, stdin []byte, cmd string) (Output, error) {
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	done := make(chan error, 1)
	go func() {
		if err := s.Start(cmd); err != nil {
			done <- &startError{err}
			return
		}
		done <- s.Wait()
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Signal(ssh.SIGKILL)
		s.Close()
		out := Output{ExitStatus: -1}
		select {
		case err := <-done: // the buffers are no longer written to
			out.Stdout, out.Stderr = stdout.Bytes(), stderr.Bytes()
			var ee *ssh.ExitError
			if errors.As(err, &ee) {
				out.Signal = ee.Signal()
				if out.Signal == "" {
					out.ExitStatus = ee.ExitStatus()
				}
			}
		case <-time.After(cancelGrace):
		}
		return out, fmt.Errorf("stopped (remote command sent SIGKILL): %w", ctx.Err())
	}
	out := Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var ee *ssh.ExitError
	var se *startError
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &ee):
		out.ExitStatus = ee.ExitStatus()
		if sig := ee.Signal(); sig != "" {
			out.ExitStatus, out.Signal = -1, sig
		}
		return out, nil
	case errors.As(err, &se) && !connBroken(c):
		// The server refused the exec request: the command did not run.
		out.ExitStatus = -1
		return out, fmt.Errorf("start command: %w", err)
	default:
		// ExitMissingError or a transport error: the command was sent and may have run.
		out.ExitStatus = -1
		h.forget(c)
		return out, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
}

// connBroken reports whether c has ended, waiting briefly for the end to be noticed.
func connBroken(c *conn) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(50 * time.Millisecond):
		return false
	}
}

// short renders argv for messages, cut to a readable length.
func short(argv []string) string {
	s := Quote(argv)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
