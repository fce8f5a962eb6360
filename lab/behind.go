package lab

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// RestartLeavingWorkers restarts service's unit behind opsbot's back, as a
// person would with `systemctl restart UNIT` on its host, while the
// engine's workers are busy in CUDA teardown: they survive the stop (as
// the orphans fault makes every stop do), keep their GPU memory and stay
// in the unit's cgroup, so the new start finds the memory held, exits, and
// systemd restarts it again and again: the incident's restart loop, made
// outside any job of opsbot, for its watchdog to find. It returns once
// systemctl has returned; the loop goes on until something frees the GPUs
// (`gpu recover`). The service's engine must be running.
func (l *Lab) RestartLeavingWorkers(ctx context.Context, service string) error {
	var info *ServiceInfo
	for i := range l.services {
		if l.services[i].Name == service {
			info = &l.services[i]
		}
	}
	if info == nil {
		return fmt.Errorf("restart %s behind opsbot's back: the lab has no service %q", service, service)
	}
	h := l.Host(info.Host)
	w := l.w
	w.lock()
	u := h.sd.units[info.Unit]
	if u == nil || u.run == nil || !u.run.alive {
		w.unlock()
		return fmt.Errorf("restart %s behind opsbot's back: %s on %s runs no engine", service, info.Unit, info.Host)
	}
	r := u.run
	r.keepWorkers = true
	for _, p := range r.workers {
		if !p.dead && p.heldMiB() > 0 {
			p.onSignal = func(syscall.Signal) {} // busy in CUDA teardown; survives its parent
		}
	}
	w.unlock()
	l.log.Info("lab: restarting a unit behind opsbot's back; its workers keep their GPU memory", "host", info.Host, "unit", info.Unit)
	_, stderr, code := h.Exec(ctx, nil, "systemctl", "restart", info.Unit)
	if code != 0 {
		return fmt.Errorf("restart %s behind opsbot's back: systemctl restart %s on %s: exit %d: %s",
			service, info.Unit, info.Host, code, strings.TrimSpace(string(stderr)))
	}
	return nil
}

// armRestartLoop arms the restart-loop fault: its duration after the lab
// started, once the default service serves, RestartLeavingWorkers on it.
func (l *Lab) armRestartLoop() {
	d := l.faults.restartLoop
	if d <= 0 || len(l.services) == 0 {
		return
	}
	service := l.services[0].Name
	var fire func()
	fire = func() { // mu held
		info := l.services[0]
		u := l.Host(info.Host).sd.units[info.Unit]
		if u == nil || u.run == nil || !u.run.ready {
			l.w.after(time.Second, fire) // still loading: once it serves
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { // Close ends the restart
				select {
				case <-l.done:
					cancel()
				case <-ctx.Done():
				}
			}()
			if err := l.RestartLeavingWorkers(ctx, service); err != nil {
				l.log.Warn("lab: the restart-loop fault did not restart the service", "service", service, "err", err)
			}
		}()
	}
	l.w.lock()
	l.w.after(d, fire)
	l.w.unlock()
}
