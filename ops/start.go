package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/systemd"
)

// StartError is a start that did not lead to a serving engine: the unit looped
// (Restart= kept restarting it), failed, or left active while the engine loaded.
// Diag names the known cause and quotes the decisive journal line.
type StartError struct {
	Service  string
	Unit     string
	Loop     bool
	Restarts int
	State    string // ActiveState/SubState when it was seen
	Diag     systemd.Diagnosis
}

func (e *StartError) Error() string {
	what := "failed to start (" + e.State + ")"
	switch {
	case e.Loop:
		what = fmt.Sprintf("is in a restart loop (NRestarts %d)", e.Restarts)
	case strings.HasSuffix(e.State, "/auto-restart"):
		// Restart= will start it again, but it has not yet: one crash, not a loop.
		what = "crashed while starting (" + e.State + ", before any automatic restart)"
	}
	msg := fmt.Sprintf("%s %s", e.Unit, what)
	if e.Diag.Line != "" {
		msg += fmt.Sprintf(": %q", e.Diag.Line)
	}
	if e.Diag.Hint != "" {
		msg += "; " + e.Diag.Hint
	}
	if e.Diag.Cause == "" || e.Diag.Cause == "crash" {
		msg += fmt.Sprintf(" (`svc logs %s lines=200` shows the journal)", e.Service)
	}
	return msg
}

// isUnknownOutcome reports a transport error: the command may or may not have
// run (the connection dropped), so the state must be read again.
func isUnknownOutcome(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ce *systemd.CommandError
	return !errors.As(err, &ce)
}

// systemctl runs a start/stop action. When the connection drops while it runs
// (the action may have taken effect), it reconnects, reads the state back and
// accepts it when the action did happen; res records connection_lost.
func (r *Runbook) systemctl(ctx context.Context, t *target, res *Result, st *step, verb string) error {
	var err error
	switch verb {
	case "start":
		err = t.unit.Start(ctx)
	case "stop":
		err = t.unit.Stop(ctx)
	default:
		return fmt.Errorf("unknown action %q", verb)
	}
	if !isUnknownOutcome(ctx, err) {
		return err
	}
	res.AddIncident(IncidentConnectionLost)
	st.warn("connection to %s lost during systemctl %s (%v): reconnecting to read the state back", t.cfg.Host, verb, err)
	s, err2 := t.unit.Show(ctx)
	if err2 != nil {
		return fmt.Errorf("systemctl %s %s: %w; reading the state back also failed: %v", verb, t.cfg.Unit, err, err2)
	}
	switch {
	case verb == "stop" && s.Stopped():
		return nil
	case verb == "start" && (s.ActiveState == "active" || s.ActiveState == "activating"):
		return nil
	}
	return fmt.Errorf("systemctl %s %s: %w (the unit is now %s/%s)", verb, t.cfg.Unit, err, s.ActiveState, s.SubState)
}

// looping reports a unit caught in Restart='s loop right now: waiting to
// restart, starting again after automatic restarts, or stopped by the start
// rate limit.
func looping(s systemd.State) bool {
	return s.AutoRestarting() || s.StartLimitHit() || (s.ActiveState == "activating" && s.NRestarts > 0)
}

// restartedSinceStart reports a unit that systemd restarted automatically since
// it was last started by hand (systemctl resets NRestarts on a manual start);
// with Type=simple each new attempt reads active while it loads, so a looping
// unit may look active at the moment it is read.
func restartedSinceStart(s systemd.State) bool {
	return looping(s) || (s.ActiveState != "inactive" && s.NRestarts > 0)
}

// stop stops the service and waits until it is inactive; a replica behind
// a router is drained first (drain). A restart loop in
// progress is recorded (restart_loop) and stopped with it.
func (r *Runbook) stop(ctx context.Context, t *target, res *Result, rep Reporter) error {
	if err := r.drain(ctx, t, res, rep); err != nil {
		return err
	}
	st := begin(rep, "stop", "stopping %s on %s", t.cfg.Unit, t.cfg.Host)
	s, err := t.unit.Show(ctx)
	if err != nil {
		return st.fail(err)
	}
	if !s.Found() {
		return st.fail(fmt.Errorf("unit %s is not loaded on %s (LoadState=%s)", t.cfg.Unit, t.cfg.Host, s.LoadState))
	}
	if restartedSinceStart(s) {
		res.AddIncident(IncidentRestartLoop)
		st.warn("%s was in a restart loop (%s/%s, NRestarts %d): stopping it", t.cfg.Unit, s.ActiveState, s.SubState, s.NRestarts)
	}
	if s.Stopped() {
		st.done("already %s", stoppedText(s))
		return nil
	}
	res.did.changed, res.did.started = true, false
	if err := r.systemctl(ctx, t, res, st, "stop"); err != nil {
		return st.fail(err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.StopTimeout)
	defer cancel()
	if s, err = t.unit.WaitStopped(wctx); err != nil {
		return st.fail(err)
	}
	st.done("%s", stoppedText(s))
	return nil
}

// stoppedText says how a stopped unit reads: "inactive", or, for one systemd
// marks failed, that it is stopped all the same (failed is what its last run
// left, not a failure of the stop).
func stoppedText(s systemd.State) string {
	if s.ActiveState == "failed" {
		return "stopped (systemd marks the unit failed: its last run ended in an error)"
	}
	return s.ActiveState
}

// startAndServe starts the service and waits until the engine serves. With
// recoverLoop, a start that loops or fails because GPU memory is held is
// recovered once: stop, clear the GPUs, start again. The error of a start that
// still fails is a *StartError.
func (r *Runbook) startAndServe(ctx context.Context, t *target, res *Result, rep Reporter, recoverLoop bool) error {
	err := r.startOnce(ctx, t, res, rep)
	if !recoverLoop {
		return err
	}
	return r.recoverStart(ctx, t, res, rep, err)
}

// recoverStart recovers a start that failed with err, once, when the cause is
// GPU memory held by something else: stop, clear the GPUs, start again. Any
// other err is returned as it is, among them an out-of-memory start on GPUs
// seen clear just before it (systemd.CauseSettingsDoNotFit): starting the same
// settings again would fail the same way after one more model load.
func (r *Runbook) recoverStart(ctx context.Context, t *target, res *Result, rep Reporter, err error) error {
	var se *StartError
	if !errors.As(err, &se) || se.Diag.Cause != systemd.CauseGPUMemoryHeld || ctx.Err() != nil {
		return err
	}
	res.AddIncident(IncidentGPUMemoryHeld)
	if err := r.stop(ctx, t, res, rep); err != nil {
		return err
	}
	if err := r.clearGPUs(ctx, t, res, rep, false); err != nil {
		return err
	}
	return r.startOnce(ctx, t, res, rep)
}

// startOnce starts the unit (clearing a failed state first), watches it settle
// and waits until the engine is ready.
func (r *Runbook) startOnce(ctx context.Context, t *target, res *Result, rep Reporter) error {
	st := begin(rep, StepStart, "starting %s on %s", t.cfg.Unit, t.cfg.Host)
	s0, err := t.unit.Show(ctx)
	if err != nil {
		return st.fail(err)
	}
	if s0.ActiveState == "failed" {
		if err := t.unit.ResetFailed(ctx); err != nil {
			return st.fail(err)
		}
	}
	since := time.Now()
	gpusClear := res.did.gpusClear
	res.did.gpusClear = false
	if res.did.rep == nil {
		res.did.rep = rep // leave's rejoin reports here
	}
	res.did.changed, res.did.started = true, true
	res.did.starts++
	if err := r.systemctl(ctx, t, res, st, "start"); err != nil {
		var ce *systemd.CommandError
		if errors.As(err, &ce) {
			return st.fail(r.startError(ctx, t, res, since, gpusClear, false, s0.NRestarts, systemd.State{ActiveState: "failed"}))
		}
		return st.fail(err)
	}
	s, err := t.unit.WatchStart(ctx, s0.NRestarts, r.cfg.SettleTime)
	if err != nil {
		var loop *systemd.LoopError
		var failed *systemd.FailedError
		switch {
		case errors.As(err, &loop):
			return st.fail(r.startError(ctx, t, res, since, gpusClear, true, loop.State.NRestarts, loop.State))
		case errors.As(err, &failed):
			return st.fail(r.startError(ctx, t, res, since, gpusClear, false, failed.State.NRestarts, failed.State))
		}
		return st.fail(err)
	}
	st.done("active (PID %d)", s.MainPID)
	return r.waitServing(ctx, t, res, rep, since, gpusClear, s.NRestarts)
}

// startError builds the *StartError of a start, diagnosed from the journal
// lines written since the start. gpusClear says the GPUs were seen clear just
// before the start: an out-of-memory line then blames the settings
// (systemd.Diagnosis.OnClearGPUs). A unit that crashed once and waits for
// Restart= (NRestarts 0) is a failed start, not a loop.
func (r *Runbook) startError(ctx context.Context, t *target, res *Result, since time.Time, gpusClear, loop bool, restarts int, s systemd.State) *StartError {
	loop = loop && restarts > 0
	if loop {
		res.AddIncident(IncidentRestartLoop)
	} else {
		res.AddIncident(IncidentStartFailed)
	}
	e := &StartError{Service: t.name, Unit: t.cfg.Unit, Loop: loop, Restarts: restarts,
		State: s.ActiveState + "/" + s.SubState}
	lines, err := t.unit.Journal(ctx, systemd.JournalQuery{Since: since.Add(-time.Second), Lines: 500})
	if err == nil {
		e.Diag = systemd.Diagnose(lines)
		if gpusClear {
			e.Diag = e.Diag.OnClearGPUs(t.cfg.Engine)
			e.Diag.Hint += r.fitAdvice(ctx, t, e.Diag)
		}
	}
	return e
}

// waitServing waits until the engine answers /health with 200, reporting the
// phases (port refused while loading, 503 while warming up). It also watches
// the unit: a crash or restart while loading ends the wait at once with a
// *StartError instead of waiting out the ready timeout.
func (r *Runbook) waitServing(ctx context.Context, t *target, res *Result, rep Reporter, since time.Time, gpusClear bool, restarts int) error {
	st := begin(rep, "wait until ready", "waiting for %s to serve (up to %s)", t.cfg.URL, t.cfg.ReadyTimeout)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, t.cfg.ReadyTimeout)
	defer cancel()
	t0 := time.Now()
	last := engine.Phase(-1)
	lastShow, lastSaid := time.Time{}, time.Now()
	for {
		ph, perr := t.eng.Probe(ctx)
		if fe := forwardProhibited(perr); fe != nil {
			return st.fail(fe) // no wait makes it reachable
		}
		switch {
		case ph != last:
			if ph == engine.PhaseReady {
				st.done("serving after %s", time.Since(t0).Round(10*time.Millisecond))
				return nil
			}
			st.progress("%s after %s", phaseText(ph), time.Since(t0).Round(10*time.Millisecond))
			last, lastSaid = ph, time.Now()
		case time.Since(lastSaid) >= r.cfg.ProgressEvery:
			// A model load takes minutes: say every so often that the wait goes on.
			st.progress("still %s after %s: waiting for %s (gives up after %s)", phaseText(ph),
				time.Since(t0).Round(time.Second), awaited(ph), t.cfg.ReadyTimeout)
			lastSaid = time.Now()
		}
		if time.Since(lastShow) >= 10*r.cfg.Poll {
			lastShow = time.Now()
			s, err := t.unit.Show(ctx)
			if err == nil && (s.NRestarts > restarts || s.ActiveState != "active") {
				loop := s.AutoRestarting() || s.NRestarts > restarts
				return st.fail(r.startError(ctx, t, res, since, gpusClear, loop, s.NRestarts, s))
			}
			if err != nil && ctx.Err() == nil && !isUnknownOutcome(ctx, err) {
				return st.fail(err)
			}
		}
		if err := sleepCtx(ctx, r.cfg.Poll); err != nil {
			if parent.Err() == nil {
				// The ready timeout, not the job's end.
				return st.fail(&NotServingError{URL: t.cfg.URL, After: time.Since(t0).Round(time.Second), Last: phaseText(last), Err: err})
			}
			return st.fail(fmt.Errorf("%s not serving after %s (last: %s): %w", t.cfg.URL,
				time.Since(t0).Round(time.Second), phaseText(last), err))
		}
	}
}

// NotServingError is an engine that did not serve within the service's ready
// timeout while its unit stayed active.
type NotServingError struct {
	URL   string
	After time.Duration
	Last  string // the last phase seen
	Err   error
}

func (e *NotServingError) Error() string {
	return fmt.Sprintf("%s not serving after %s (the ready timeout; last: %s)", e.URL, e.After, e.Last)
}

func (e *NotServingError) Unwrap() error { return e.Err }

// awaited says what the wait for readiness waits for in phase p.
func awaited(p engine.Phase) string {
	switch p {
	case engine.PhaseRefused:
		return "the engine to open its port"
	case engine.PhaseLoading:
		return "/health to answer 200"
	}
	return "the engine to answer /health"
}

// engineText says what the engine of service does, phase p, knowing its
// unit's state s: a stopped unit's port is closed because it is stopped,
// not because the engine is loading.
func engineText(service string, s systemd.State, p engine.Phase) string {
	if p == engine.PhaseRefused && s.Stopped() {
		why := "the unit is stopped"
		if s.ActiveState == "failed" {
			why = fmt.Sprintf("the unit is stopped, its last run failed (`svc logs %s` shows why)", service)
		}
		return fmt.Sprintf("port closed: %s; `svc start %s` starts it", why, service)
	}
	return phaseText(p)
}

func phaseText(p engine.Phase) string {
	switch p {
	case engine.PhaseRefused:
		return "port refused (loading the model)"
	case engine.PhaseLoading:
		return "health 503 (warming up)"
	case engine.PhaseReady:
		return "serving"
	}
	return "health check error"
}

// hostErr wraps an error of host with what was being done.
func hostErr(what, host string, err error) error {
	return fmt.Errorf("%s on %s: %w", what, host, err)
}
