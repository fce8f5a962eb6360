package ops

import (
	"context"
	"fmt"

	"github.com/opsbot/opsbot/ops/systemd"
)

func daemonReload(ctx context.Context, t *target) error {
	if err := systemd.DaemonReload(ctx, t.host); err != nil {
		return hostErr("systemctl daemon-reload", t.cfg.Host, err)
	}
	return nil
}

// ServiceAction is `svc start|stop|restart`. Start and restart wait until the
// engine serves and recover a restart loop on held GPU memory once; stop
// reports GPU memory that its stop left behind.
func (r *Runbook) ServiceAction(ctx context.Context, service, verb string, dryRun bool, rep Reporter) (_ *Result, err error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if !dryRun {
		defer func() { r.leave(ctx, t, res, err == nil && verb != "stop") }()
	}
	if dryRun {
		s, err := t.unit.Show(ctx)
		if err != nil {
			return res, err
		}
		res.Service = serviceState(t, s, "")
		res.Summary = fmt.Sprintf("dry run: would %s %s on %s (now %s/%s); nothing changed", verb, t.cfg.Unit, t.cfg.Host, s.ActiveState, s.SubState)
		return res, nil
	}
	if verb != "stop" {
		if err := r.checkReach(ctx, t); err != nil {
			return res, err
		}
	}
	unlock, err := r.holdNode(ctx, t, rep)
	if err != nil {
		return res, err
	}
	defer unlock()
	switch verb {
	case "stop":
		if err := r.stop(ctx, t, res, rep); err != nil {
			return res, err
		}
		r.reportLeftovers(ctx, t, res, rep)
		res.Summary = fmt.Sprintf("%s stopped", service)
	case "start", "restart":
		if verb == "restart" {
			if err := r.stop(ctx, t, res, rep); err != nil {
				return res, err
			}
		} else if s, err := t.unit.Show(ctx); err != nil {
			return res, err
		} else if looping(s) {
			// Stop the loop first: a start on a looping unit only queues behind it.
			if err := r.stop(ctx, t, res, rep); err != nil {
				return res, err
			}
		} else if s.Active() {
			// Running, but perhaps only one more attempt of a loop: see it serve.
			err := r.waitServing(ctx, t, res, rep, s.ActiveEnterTimestamp, false, s.NRestarts)
			if err == nil {
				res.Summary = fmt.Sprintf("%s was already running (PID %d) and serves", service, s.MainPID)
				return res, nil
			}
			if err := r.recoverStart(ctx, t, res, rep, err); err != nil {
				return res, err
			}
			res.Summary = service + " was looping; recovered and serving"
			return res, nil
		}
		if err := r.startAndServe(ctx, t, res, rep, true); err != nil {
			return res, err
		}
		res.Summary = fmt.Sprintf("%s %s and serving", service, map[string]string{"start": "started", "restart": "restarted"}[verb])
	default:
		return nil, fmt.Errorf("unknown service action %q", verb)
	}
	if s, err := t.unit.Show(ctx); err == nil {
		res.Service = serviceState(t, s, "")
	}
	return res, nil
}

// reportLeftovers warns when a stopped service left GPU memory held.
func (r *Runbook) reportLeftovers(ctx context.Context, t *target, res *Result, rep Reporter) {
	st := begin(rep, "check GPUs", "checking GPU memory after the stop")
	gpus, err := queryGPUs(ctx, t)
	if err != nil {
		st.warn("%v", err)
		return
	}
	recordGPUs(res, t.cfg.Host, gpus, t.cfg.GPUs)
	if held := heldGPUs(gpus, t.cfg.GPUs, t.cfg.ClearMiB); len(held) > 0 {
		res.AddIncident(IncidentGPUMemoryHeld)
		st.warn("%d GPUs still hold memory after the stop (GPU %d: %d MiB): dead processes may keep it; `gpu recover %s` clears it",
			len(held), held[0].Index, held[0].UsedMiB, t.name)
		return
	}
	st.done("%s", clearSummary(gpus, t.cfg.GPUs, t.cfg.ClearMiB))
}

func serviceState(t *target, s systemd.State, ready string) *ServiceState {
	return &ServiceState{Service: t.name, Unit: t.cfg.Unit, Host: t.cfg.Host, ActiveState: s.ActiveState,
		SubState: s.SubState, NRestarts: s.NRestarts, MainPID: s.MainPID, Ready: ready}
}

// ServiceStatus is `svc status`: systemd's state, restarts and readiness.
func (r *Runbook) ServiceStatus(ctx context.Context, service string, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	s, err := t.unit.Show(ctx)
	if err != nil {
		return res, hostErr("systemctl show "+t.cfg.Unit, t.cfg.Host, err)
	}
	ph, perr := t.eng.Probe(ctx)
	res.Service = serviceState(t, s, ph.String())
	if fe := forwardProhibited(perr); fe != nil {
		// What the engine does is unknown: the watchdog must not read it as unhealthy.
		return res, fmt.Errorf("%s (%s on %s) is %s/%s, but its engine cannot be checked: %w",
			service, t.cfg.Unit, t.cfg.Host, s.ActiveState, s.SubState, fe)
	}
	res.Summary = fmt.Sprintf("%s (%s on %s): %s/%s, PID %d, NRestarts %d, engine %s",
		service, t.cfg.Unit, t.cfg.Host, s.ActiveState, s.SubState, s.MainPID, s.NRestarts, engineText(service, s, ph))
	if restartedSinceStart(s) {
		res.AddIncident(IncidentRestartLoop)
		res.Details = append(res.Details, fmt.Sprintf("systemd restarted the unit %d times since it was last started: a restart loop. "+
			"`svc logs %s` shows why; `gpu recover %s` stops it, clears GPU memory and starts it fresh", s.NRestarts, service, service))
	}
	if s.NeedDaemonReload {
		res.AddIncident(IncidentNeedReload)
		res.Details = append(res.Details, "the unit file changed on disk and systemd has not reloaded it")
	}
	return res, nil
}

// ServiceLogs is `svc logs`: the last lines of the service's journal.
func (r *Runbook) ServiceLogs(ctx context.Context, service string, lines int, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if lines <= 0 {
		lines = 50
	}
	ls, err := t.unit.Journal(ctx, systemd.JournalQuery{Lines: lines})
	if err != nil {
		return res, hostErr("journalctl -u "+t.cfg.Unit, t.cfg.Host, err)
	}
	res.Logs = ls
	res.Summary = fmt.Sprintf("last %d journal lines of %s on %s", len(ls), t.cfg.Unit, t.cfg.Host)
	if d := systemd.Diagnose(ls); d.Cause != "" {
		res.Details = append(res.Details, fmt.Sprintf("known cause in these lines: %s: %q", d.Cause, d.Line))
	}
	return res, nil
}
