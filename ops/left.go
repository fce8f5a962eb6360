package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/ops/remote"
)

// LeftState is what a service is doing when its job returns.
type LeftState string

// The states a job leaves a service in.
const (
	LeftServing  LeftState = "serving"  // active, and the engine answers /health
	LeftStarting LeftState = "starting" // started (or restarting): the engine does not serve yet
	LeftStopped  LeftState = "stopped"  // inactive or failed: not serving
	LeftUnknown  LeftState = "unknown"  // the host did not answer when asked
)

// Which unit text is in place when a job that edits the unit returns.
const (
	UnitOld = "old" // the text the job found (never changed, or restored)
	UnitNew = "new" // the job's edit
)

// NextStep is the kind of command that helps a service next. The
// pipelines say which; the job runtime writes the command itself in the
// command language's words (ServiceLeft.Next).
type NextStep string

// The steps that help next.
const (
	NextStart   NextStep = "start"   // start it and wait until it serves
	NextStatus  NextStep = "status"  // show whether it serves: it is starting, or unknown
	NextRecover NextStep = "recover" // clear its GPUs and start it
	NextGPUs    NextStep = "gpus"    // show who holds its host's GPUs
	NextReset   NextStep = "reset"   // reset the GPUs ResetGPUs of Node (memory held by no process)
)

// ServiceLeft is the state a job left its service in, and what helps next.
// Its JSON is the "left" object of `opsbot run --json`:
//
//	{"service": "qwen", "state": "stopped", "unit": "new", "steps": 6, "changed": true,
//	 "next_step": "start", "host": "gpu1", "next": "svc start qwen",
//	 "undo_steps": 3, "undo": "mtp steps 3 qwen"}
type ServiceLeft struct {
	Service string    `json:"service"`
	State   LeftState `json:"state"`
	// Unit is which unit text is in place, UnitOld or UnitNew; "" for a job
	// that does not edit the unit.
	Unit string `json:"unit,omitempty"`
	// Steps are the draft steps of the unit in place (jobs that edit it).
	Steps int `json:"steps,omitempty"`
	// Changed is false when the job did nothing to the service (no stop, no
	// write, no start): it is as the job found it.
	Changed bool `json:"changed"`
	// RolledBack: the job put the previous unit text back.
	RolledBack bool `json:"rolled_back,omitempty"`
	// Started: the job issued a start on the unit in place that the service
	// has not finished (a cancel or shutdown does not stop a start once
	// systemctl start has run; the engine goes on loading).
	Started bool `json:"started,omitempty"`
	// NextStep is what gets the service serving again (or shows when it
	// does), when a command of opsbot helps; "" when it serves, or when none
	// does (then Advice says what does). Host is the service's host, which
	// NextGPUs looks at.
	NextStep NextStep `json:"next_step,omitempty"`
	Host     string   `json:"host,omitempty"`
	// ResetGPUs and Node are the GPUs NextReset resets, by the indexes of
	// Node, the machine that owns them.
	ResetGPUs []int  `json:"reset_gpus,omitempty"`
	Node      string `json:"node,omitempty"`
	// Next is the one chat command that takes NextStep: the pipelines set
	// NextStep only; the job runtime writes Next before the result is kept
	// or shown.
	Next string `json:"next,omitempty"`
	// UndoSteps are the steps the unit had before the job, when the new
	// unit is in place and they differ: what Undo puts back.
	UndoSteps int `json:"undo_steps,omitempty"`
	// Undo is the chat command that puts UndoSteps back. The pipelines set
	// UndoSteps only; the job runtime writes Undo in the command language's
	// words before the result is kept or shown.
	Undo string `json:"undo,omitempty"`
	// Advice is what helps when no command of opsbot does, such as a GPU
	// reset or a reboot for a process in D state.
	Advice string `json:"advice,omitempty"`
	// Unreachable: the unit is active but its engine cannot be reached to
	// see whether it serves (the host's SSH server refuses to forward to a
	// via_ssh service's URL); State is then LeftUnknown.
	Unreachable bool `json:"unreachable,omitempty"`
	// OutOfRouter: the job took the replica out of its router (a drain)
	// and left it there, as it does not serve; a job that leaves it
	// serving puts it back.
	OutOfRouter bool `json:"out_of_router,omitempty"`
	// notRead: State is LeftUnknown because this process no longer holds
	// the service's lease, so it sent the host nothing more (not even a
	// read), rather than because the host did not answer.
	notRead bool
}

// did is what a pipeline has done to its service so far; leave turns it into
// Result.Left.
type did struct {
	changed    bool   // stopped, wrote or started something
	started    bool   // the last action was a start
	unit       string // UnitOld, UnitNew or "" (no unit edit in this job)
	steps      int    // steps of the unit text in place
	oldSteps   int    // steps of the text the job found
	rolledBack bool
	// restored: the rollback put the previous unit back and it serves again.
	restored  bool
	advice    string // set when no command of opsbot helps (D state)
	gpuHeld   bool   // the GPUs could not be cleared
	gpusClear bool   // the GPUs were seen clear since the last start (clearGPUs); a start consumes it
	resetGPUs []int  // memory no process holds stays on these GPUs of resetNode: only a reset frees it
	resetNode string
	starts    int // systemctl starts issued (a failed start and its rollback's are two)
	// drained: the job took the replica out of its router (drain.go) and
	// has not put it back; keptOut: it found it serving and out already
	// (someone took it out: it stays out); noRouterSaid: the job said that
	// the replica has no router; rep: where the drain's steps went (the
	// rejoin in leave reports there).
	drained, keptOut, noRouterSaid bool
	rep                            Reporter
}

// leftReadTimeout bounds the reading of a service's state for Result.Left,
// which runs even when the job's context has ended.
const leftReadTimeout = 10 * time.Second

// leave sets res.Left from what the pipeline did (res.did) and the state
// systemd and the engine report now. It runs on every return of a pipeline
// that acts on a service, with a context of its own when ctx has ended
// (cancel, timeout, shutdown), bounded by leftReadTimeout. serving is true
// when the pipeline has just seen the engine serve (no need to read it).
func (r *Runbook) leave(ctx context.Context, t *target, res *Result, serving bool) {
	if res == nil || t == nil {
		return
	}
	d := res.did
	l := &ServiceLeft{Service: t.name, Host: t.cfg.Host, Unit: d.unit, Changed: d.changed, RolledBack: d.rolledBack, Advice: d.advice}
	if d.unit != "" {
		l.Steps = d.steps
	}
	if serving {
		l.State = LeftServing
	} else {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leftReadTimeout)
		defer cancel()
		l.State = LeftUnknown
		s, err := t.unit.Show(rctx)
		l.notRead = errors.Is(err, remote.ErrHoldLost)
		if err == nil {
			switch {
			case s.Stopped():
				l.State = LeftStopped
			case s.ActiveState == "active":
				l.State = LeftStarting
				ph, perr := t.eng.Probe(rctx)
				if ph == engine.PhaseReady {
					l.State = LeftServing
				} else if fe := forwardProhibited(perr); fe != nil {
					l.State, l.Unreachable = LeftUnknown, true
					if l.Advice == "" {
						l.Advice = fmt.Sprintf("allow TCP forwarding on %s (AllowTcpForwarding local in its sshd_config, then reload sshd), or drop via_ssh from %s",
							t.cfg.Host, t.name)
					}
				}
			default: // activating, deactivating, reloading
				l.State = LeftStarting
			}
		}
	}
	l.Started = d.started && l.State == LeftStarting
	if rejoins(t, d) {
		back := l.State == LeftServing && r.rejoin(ctx, t, res)
		l.OutOfRouter = !back && d.drained
	}
	switch {
	case l.State == LeftServing:
	case l.Advice != "":
		// Nothing opsbot runs helps until the GPU is reset or the node
		// rebooted, or until the host forwards to the engine.
	case l.State == LeftUnknown, l.State == LeftStarting:
		l.NextStep = NextStatus
	case len(d.resetGPUs) > 0:
		l.NextStep, l.ResetGPUs, l.Node = NextReset, d.resetGPUs, d.resetNode
	case d.gpuHeld:
		l.NextStep = NextRecover
	default:
		l.NextStep = NextStart
	}
	if d.unit == UnitNew && d.oldSteps > 0 && d.oldSteps != d.steps {
		l.UndoSteps = d.oldSteps
	}
	res.Left = l
}

// Sentence says in one line what state l is, for the final message of a job:
// "qwen is stopped; its unit has the new text (steps 6), not started".
func (l *ServiceLeft) Sentence() string {
	if l == nil {
		return ""
	}
	on := ""
	switch {
	case l.Unit == UnitNew:
		on = fmt.Sprintf(" on the new unit (steps %d)", l.Steps)
	case l.Unit == UnitOld && l.RolledBack:
		on = fmt.Sprintf(" on the restored previous unit (steps %d)", l.Steps)
	case l.Unit == UnitOld:
		on = fmt.Sprintf(" on its unchanged unit (steps %d)", l.Steps)
	}
	var s string
	switch l.State {
	case LeftServing:
		s = l.Service + " serves" + on
	case LeftStarting:
		if l.Started {
			s = l.Service + " was started" + on + " and is still loading (the job does not stop a start it began)"
		} else {
			s = l.Service + " is starting" + on + ", not serving yet"
		}
	case LeftStopped:
		switch {
		case l.Unit == UnitNew:
			s = fmt.Sprintf("%s is stopped; its unit has the new text (steps %d), not started", l.Service, l.Steps)
		case l.Unit == UnitOld && l.RolledBack:
			s = fmt.Sprintf("%s is stopped; the previous unit (steps %d) is restored, not started", l.Service, l.Steps)
		case l.Unit == UnitOld:
			s = fmt.Sprintf("%s is stopped; its unit is unchanged (steps %d)", l.Service, l.Steps)
		default:
			s = l.Service + " is stopped"
		}
	default:
		s = l.Service + " is in an unknown state (its host did not answer)"
		if l.notRead {
			s = l.Service + " was not checked: this opsbot process no longer holds it, so it sent its host nothing more"
			switch l.Unit {
			case UnitNew:
				s += fmt.Sprintf("; its unit has the new text (steps %d)", l.Steps)
			case UnitOld:
				s += fmt.Sprintf("; its unit has the previous text (steps %d)", l.Steps)
			}
		}
		if l.Unreachable {
			s = l.Service + "'s unit is active" + on + ", but opsbot cannot reach its engine to see whether it serves"
		}
	}
	if !l.Changed {
		s += "; the job changed nothing"
	}
	if l.OutOfRouter {
		s += "; it is out of its router and rejoins when a job leaves it serving"
	}
	return s
}

// stuckAdvice says what helps a service whose GPUs a D-state process holds:
// no signal ends it and the driver refuses a GPU reset while it holds the
// GPU, so only a reboot of the machine it runs on (the node) frees it, and
// that takes down every service there (onNode).
func stuckAdvice(t *target, kill []gpu.Process, err *gpu.StuckError, onNode []string) (msg, advice string) {
	var who []string
	for _, pid := range err.PIDs {
		for _, p := range kill {
			if p.PID != pid {
				continue
			}
			var on []string
			for _, g := range p.GPUs {
				on = append(on, fmt.Sprint(g.Index))
			}
			where := ""
			if len(on) > 0 {
				where = " holding GPU " + strings.Join(on, ",")
			}
			who = append(who, fmt.Sprintf("PID %d (%s)%s", p.PID, shortCommand(p.Cmdline), where))
		}
	}
	if len(who) == 0 {
		for _, pid := range err.PIDs {
			who = append(who, fmt.Sprintf("PID %d", pid))
		}
	}
	advice = rebootAdvice(t.nodeName, onNode, "no signal ends a process in D state and the driver refuses a GPU reset while it holds the GPU (neither `gpu recover` nor `gpu reset` can help)")
	msg = fmt.Sprintf("on %s, %s in D state (uninterruptible, inside the GPU driver): no signal can kill it, so %s's GPUs cannot be cleared",
		t.nodeName, strings.Join(who, ", "), t.name)
	return msg, advice
}

// StuckProcessError is a D-state process that holds a service's GPUs: only a
// GPU reset or a reboot of the node ends it. It wraps the *gpu.StuckError.
type StuckProcessError struct {
	Service string
	Node    string
	Msg     string // the processes, where they live, the GPUs they hold
	Advice  string
	Err     *gpu.StuckError
}

func (e *StuckProcessError) Error() string {
	return e.Msg + "; " + e.Service + " is down (stopped). " + upperFirst(e.Advice)
}

func (e *StuckProcessError) Unwrap() error { return e.Err }

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
