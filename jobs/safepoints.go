package jobs

import (
	"sync"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// safePoints tracks whether a job is inside a step that must not be cut in
// half, and stops the job at the end of that step when asked to stop.
type safePoints struct {
	mu      sync.Mutex
	open    map[string]bool // critical steps started and not yet ended
	stop    func()          // set by stopAtSafePoint while a step is open
	obs     Observer
	job     store.Job
	started map[string]time.Time
	forward ops.Reporter
}

// Report forwards ev to the job's thread, times the step for the observer,
// and stops the job once its last critical step ended if a stop is pending.
func (s *safePoints) Report(ev ops.Event) {
	s.forward.Report(ev)
	var stop func()
	s.mu.Lock()
	switch ev.Status {
	case ops.StepStarted:
		if ops.Critical(ev.Step) {
			s.open[ev.Step] = true
		}
		if s.obs != nil {
			s.started[ev.Step] = ev.At
		}
	case ops.StepDone, ops.StepFailed, ops.StepSkipped:
		delete(s.open, ev.Step)
		if len(s.open) == 0 && s.stop != nil {
			stop, s.stop = s.stop, nil
		}
		if t0, ok := s.started[ev.Step]; ok && s.obs != nil {
			delete(s.started, ev.Step)
			at := ev.At
			if at.IsZero() {
				at = time.Now()
			}
			s.obs.StepEnded(s.job, ev.Step, ev.Status, at.Sub(t0))
		}
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// stopAtSafePoint calls stop now when no critical step is open, else when
// the last open one ends; then it returns the steps it waits for.
func (s *safePoints) stopAtSafePoint(stop func()) (waitFor []string) {
	s.mu.Lock()
	if len(s.open) > 0 {
		s.stop = stop
		for step := range s.open {
			waitFor = append(waitFor, step)
		}
		s.mu.Unlock()
		return waitFor
	}
	s.mu.Unlock()
	stop()
	return nil
}

// StopPending reports whether job id runs in this process and its stop
// waits for the critical steps it is inside to end (a shutdown or a cancel
// asked while it was in a unit write or a start).
func (e *Engine) StopPending(id int64) bool {
	e.mu.Lock()
	r, ok := e.jobs[id]
	e.mu.Unlock()
	if !ok || r.safe == nil {
		return false
	}
	r.safe.mu.Lock()
	defer r.safe.mu.Unlock()
	return r.safe.stop != nil
}

// Observer is told what the job engine does, for metrics. Its methods are
// called on the job's own path: they must be quick, must not block and must
// be safe for concurrent use. command is the command's name ("mtp steps").
type Observer interface {
	// JobQueued: a job was accepted and waits to run.
	JobQueued(j store.Job, command string)
	// JobStarted: it holds its service (after lockWait) and runs.
	JobStarted(j store.Job, command string, lockWait time.Duration)
	// StepEnded: one pipeline step ended (done, failed or skipped).
	StepEnded(j store.Job, step string, status ops.StepStatus, took time.Duration)
	// JobEnded: the job reached its final state after took (queue included);
	// res is the pipeline's result, nil when there is none. Called for every
	// job JobQueued was called for, once.
	JobEnded(j store.Job, command string, status store.Status, took time.Duration, res *ops.Result)
}
