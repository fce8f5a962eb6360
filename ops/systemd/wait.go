package systemd

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WaitError is a wait that ended with its context before the condition held.
// It wraps the context's error (errors.Is context.DeadlineExceeded) and keeps
// the last state seen, so the message says what the unit was doing instead.
type WaitError struct {
	Unit    string
	What    string // what was waited for, e.g. "stopped"
	Last    State  // the last state read (zero when none was)
	Waited  time.Duration
	Err     error // ctx.Err()
	HasLast bool
}

func (e *WaitError) Error() string {
	last := "no state read"
	if e.HasLast {
		last = "last " + e.Last.String()
	}
	return fmt.Sprintf("wait for %s to be %s: %s after %s: %v", e.Unit, e.What, last, e.Waited.Round(time.Millisecond), e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// transportRetries is how many Show calls in a row may fail in transport (a
// dropped connection, redialled by the next call) before a wait gives up.
const transportRetries = 3

// WaitFor polls Show every Poll until cond holds and returns that state. It
// ends with ctx as a *WaitError naming what (e.g. "active") and the last
// state. A command or parse error of Show ends it at once; a transport error
// is retried at the next poll, up to transportRetries in a row, because a
// wait can last minutes and the pool redials a dropped connection.
func (s Service) WaitFor(ctx context.Context, what string, cond func(State) bool) (State, error) {
	start := time.Now()
	tick := time.NewTicker(s.poll())
	defer tick.Stop()
	we := &WaitError{Unit: s.Unit, What: what}
	failures := 0
	for {
		st, err := s.Show(ctx)
		var ce *CommandError
		var pe *ParseError
		switch {
		case err == nil:
			failures = 0
			we.Last, we.HasLast = st, true
			if cond(st) {
				return st, nil
			}
		case ctx.Err() != nil:
		case errors.As(err, &ce), errors.As(err, &pe):
			return st, fmt.Errorf("wait for %s to be %s: %w", s.Unit, what, err)
		default: // transport: the next Show redials
			if failures++; failures > transportRetries {
				return st, fmt.Errorf("wait for %s to be %s: %w", s.Unit, what, err)
			}
		}
		select {
		case <-ctx.Done():
			we.Err, we.Waited = ctx.Err(), time.Since(start)
			return we.Last, we
		case <-tick.C:
		}
	}
}

// WaitStopped waits until the unit is inactive or failed with no automatic
// restart pending (State.Stopped).
func (s Service) WaitStopped(ctx context.Context) (State, error) {
	return s.WaitFor(ctx, "stopped", State.Stopped)
}

// LoopError is a unit in a restart loop: its main process died and systemd
// restarted it (Restarts times since the start being watched).
type LoopError struct {
	Unit     string
	Restarts int   // restarts since the watched start
	State    State // the state that showed the loop
}

func (e *LoopError) Error() string {
	return fmt.Sprintf("%s is in a restart loop: restarted %d time(s) since the start (%s)", e.Unit, e.Restarts, e.State)
}

// FailedError is a watched start that ended: the unit is failed (for example
// Result=start-limit-hit or exit-code) or went inactive on its own.
type FailedError struct {
	Unit  string
	State State
}

func (e *FailedError) Error() string {
	msg := fmt.Sprintf("%s failed to start (%s)", e.Unit, e.State)
	if x := e.State.MainExit(); x != "" {
		msg += ": main process " + x
	}
	if e.State.StartLimitHit() {
		msg += "; the start limit was hit: reset-failed before starting again"
	}
	return msg
}

// WatchStart watches a unit that was just started (baseRestarts is its
// NRestarts right after the start; systemd resets it to 0 on a manual start).
// It returns the state once the unit is active and has stayed active for
// settle with NRestarts still baseRestarts. It returns
//   - *LoopError as soon as NRestarts rose above baseRestarts while the unit is
//     not failed: the main process died and systemd restarted it (the usual
//     sighting is activating/auto-restart or auto-restart-queued);
//   - *FailedError when the unit is failed (start-limit-hit included), went
//     inactive, or crashed and waits longer than LongRestartSec for Restart=
//     to start it again (auto-restart with NRestarts still baseRestarts): the
//     watch does not wait for a restart that far off, and reports the crash;
//   - *WaitError when ctx ends first, or the error of Show.
//
// systemd resets NRestarts on a manual start, so a reading below baseRestarts
// lowers the base: a rise from the lowest value seen is a restart too.
// A settle of 0 returns at the first active reading.
// LongRestartSec is the longest RestartSec= WatchStart waits out to see
// whether a crashed unit's automatic restart loops; a unit that waits
// longer (or forever) for its restart is reported crashed at once.
const LongRestartSec = 30 * time.Second //lint:ignore ST1011 named after RestartSec=, the unit file's key

// longRestartPending reports a unit that crashed and waits longer than
// LongRestartSec for its automatic restart.
func longRestartPending(st State) bool {
	return st.AutoRestarting() && (st.RestartSec < 0 || st.RestartSec > LongRestartSec)
}

func (s Service) WatchStart(ctx context.Context, baseRestarts int, settle time.Duration) (State, error) {
	var activeSince time.Time
	base := baseRestarts
	st, err := s.WaitFor(ctx, "active and settled", func(st State) bool {
		base = min(base, st.NRestarts)
		switch {
		case st.ActiveState == "failed", st.Stopped():
			return true
		case st.NRestarts > base, longRestartPending(st):
			return true
		case st.Active():
			if activeSince.IsZero() {
				activeSince = time.Now()
			}
			return time.Since(activeSince) >= settle
		}
		activeSince = time.Time{}
		return false
	})
	if err != nil {
		return st, err
	}
	switch {
	case st.ActiveState == "failed", st.Stopped():
		return st, &FailedError{Unit: s.Unit, State: st}
	case st.NRestarts > base:
		return st, &LoopError{Unit: s.Unit, Restarts: st.NRestarts - base, State: st}
	case longRestartPending(st):
		return st, &FailedError{Unit: s.Unit, State: st}
	}
	return st, nil
}
