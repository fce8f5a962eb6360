package lab

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

const unitDir = "/etc/systemd/system"

// diskUnit is a unit as found on a host's file system.
type diskUnit struct {
	name     string
	exists   bool
	fragPath string
	fragText string
	dropIns  [][2]string // path, text
}

func (d diskUnit) key() string {
	var b strings.Builder
	b.WriteString(d.fragPath + "\x00" + d.fragText)
	for _, di := range d.dropIns {
		b.WriteString("\x00" + di[0] + "\x00" + di[1])
	}
	return b.String()
}

// readDiskUnit reads a unit and its drop-ins from h's file system (no lock needed).
func (h *SimHost) readDiskUnit(name string) diskUnit {
	d := diskUnit{name: name}
	for _, dir := range []string{unitDir, "/usr/lib/systemd/system", "/lib/systemd/system"} {
		p := path.Join(dir, name)
		if b, err := os.ReadFile(h.realPath(p)); err == nil {
			d.exists, d.fragPath, d.fragText = true, p, string(b)
			break
		}
	}
	ddir := path.Join(unitDir, name+".d")
	if ents, err := os.ReadDir(h.realPath(ddir)); err == nil {
		var names []string
		for _, e := range ents {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		for _, n := range dropInNames(names) {
			p := path.Join(ddir, n)
			if b, err := os.ReadFile(h.realPath(p)); err == nil {
				d.dropIns = append(d.dropIns, [2]string{p, string(b)})
			}
		}
	}
	return d
}

// unit is the systemd state of one service (guarded by world.mu).
type unit struct {
	h    *SimHost
	name string

	loaded   diskUnit // what daemon-reload last read
	cfg      unitConfig
	loadErr  error
	isLoaded bool

	active, sub, result string
	nRestarts           int
	main                *proc
	execMainPID         int
	execMainStatus      int
	execMainCode        int // 0 none, 1 exited, 2 killed
	execMainStart       time.Time
	activeEnter         time.Time
	starts              []time.Time
	restartTimer        *simTimer
	stopTimer           *simTimer
	stopping            bool
	argv                []string
	port                int // lab port for an engine run by this unit (0 until needed)
	run                 *engineRun
	// collected is an inactive unit systemd has garbage-collected: it forgot the unit's
	// state (NRestarts, Result, ExecMain*) and loads it from disk again when next referenced,
	// so an edit needs no daemon-reload before it is shown or started.
	collected bool
}

// systemd is the service manager of one host.
type systemd struct {
	h     *SimHost
	units map[string]*unit
}

// StartLimitError is returned by start when the unit hit its start rate limit.
type startLimitError struct{ unit, result string }

func (e *startLimitError) Error() string { return e.unit + ": start limit hit" }

// load (re)reads a unit from d (mu held).
func (sd *systemd) load(d diskUnit) *unit {
	u := sd.units[d.name]
	if u == nil {
		u = &unit{h: sd.h, name: d.name, active: "inactive", sub: "dead", result: "success"}
		sd.units[d.name] = u
	}
	u.loaded = d
	u.isLoaded = d.exists
	u.loadErr = nil
	if !d.exists {
		return u
	}
	entries, err := parseUnitText(d.fragPath, d.fragText)
	for _, di := range d.dropIns {
		if err != nil {
			break
		}
		var more []unitEntry
		more, err = parseUnitText(di[0], di[1])
		entries = append(entries, more...)
	}
	if err == nil {
		u.cfg, err = buildUnitConfig(entries)
	}
	if err == nil && len(u.cfg.ExecStart) == 0 {
		err = errors.New("service has no ExecStart= setting")
	}
	if err == nil && len(u.cfg.ExecStart) > 1 && u.cfg.Type != "oneshot" {
		err = errors.New("service has more than one ExecStart= setting, which is only allowed for Type=oneshot services")
	}
	u.loadErr = err
	return u
}

// get returns the loaded unit, loading it from d if systemd has not seen it yet or has
// collected it (mu held).
func (sd *systemd) get(d diskUnit) *unit {
	if u := sd.units[d.name]; u != nil && (u.isLoaded || !d.exists) {
		return sd.refresh(u, d)
	}
	return sd.load(d)
}

// refresh loads a collected unit from d again when its files changed, as systemd does when a
// unit it garbage-collected is referenced (mu held). It returns the unit.
func (sd *systemd) refresh(u *unit, d diskUnit) *unit {
	if u != nil && u.collected && u.loaded.key() != d.key() {
		return sd.load(d)
	}
	return u
}

// collect forgets the state of a unit that became inactive (dead) with nothing left in its
// cgroup, as systemd 252 garbage-collects such a unit at once: shown again, it reads as freshly
// loaded (NRestarts 0, Result success, ExecMain* 0) (mu held). A failed unit is kept until
// reset-failed; a unit whose cgroup still holds processes (KillMode=process) is kept too.
func (u *unit) collect() {
	if u.active != "inactive" || u.stopping || u.main != nil || len(u.cgroupProcs()) > 0 {
		return
	}
	u.collected = true
	u.nRestarts, u.result = 0, "success"
	u.execMainPID, u.execMainStatus, u.execMainCode = 0, 0, 0
	u.execMainStart, u.activeEnter = time.Time{}, time.Time{}
}

// needReload reports NeedDaemonReload: the loaded unit's fragment, or one of its loaded
// drop-ins, changed or went away on disk (d). Like systemd 252, a drop-in added since the last
// reload is not noticed.
func (u *unit) needReload(d diskUnit) bool {
	if !u.isLoaded {
		return false
	}
	if u.loaded.fragPath != d.fragPath || u.loaded.fragText != d.fragText {
		return true
	}
	for _, l := range u.loaded.dropIns {
		i := slices.IndexFunc(d.dropIns, func(x [2]string) bool { return x[0] == l[0] })
		if i < 0 || d.dropIns[i][1] != l[1] {
			return true
		}
	}
	return false
}

func (u *unit) loadState() string {
	switch {
	case !u.isLoaded:
		return "not-found"
	case u.loadErr != nil:
		return "bad-setting"
	}
	return "loaded"
}

func (u *unit) desc() string {
	if u.cfg.Description != "" {
		return u.name + " - " + u.cfg.Description
	}
	return u.name
}

func (u *unit) log(format string, args ...any) {
	u.h.journal.add(u.name, "systemd", 1, fmt.Sprintf(format, args...))
}

func (u *unit) cgroup() string { return "/system.slice/" + u.name }

func (u *unit) setState(active, sub string) {
	if active == "active" && u.active != "active" {
		u.activeEnter = time.Now()
	}
	u.active, u.sub = active, sub
}

func (u *unit) w() *world { return u.h.w }

// cgroupProcs lists the live processes in the unit's cgroup (mu held).
func (u *unit) cgroupProcs() []*proc {
	var out []*proc
	for _, p := range u.w().visible(u.h.ct) {
		if p.cgroup == u.cgroup() {
			out = append(out, p)
		}
	}
	return out
}

// start starts the unit (mu held). manual is false for automatic restarts.
func (u *unit) start(manual bool) error {
	w := u.w()
	if !u.isLoaded {
		//lint:ignore ST1005 systemctl's own words, as operators see them
		return fmt.Errorf("Unit %s not found.", u.name)
	}
	if u.loadErr != nil {
		//lint:ignore ST1005 systemctl's own words, as operators see them
		return fmt.Errorf("Unit %s has a bad unit file setting.", u.name)
	}
	switch u.active {
	case "active", "deactivating":
		return nil
	case "activating":
		if u.sub != "auto-restart" {
			return nil
		}
		w.stopTimer(u.restartTimer)
	}
	now := time.Now()
	interval := w.real(u.cfg.StartLimitInterval)
	keep := u.starts[:0]
	for _, t := range u.starts {
		if now.Sub(t) < interval {
			keep = append(keep, t)
		}
	}
	u.starts = keep
	if u.cfg.StartLimitBurst > 0 && u.cfg.StartLimitInterval > 0 && len(u.starts) >= u.cfg.StartLimitBurst {
		// systemd 252 keeps an earlier failure's result: start-limit-hit replaces only success.
		u.log("%s: Start request repeated too quickly.", u.name)
		if u.result == "success" {
			u.result = "start-limit-hit"
		}
		u.log("%s: Failed with result '%s'.", u.name, u.result)
		u.log("Failed to start %s.", u.desc())
		u.setState("failed", "failed")
		return &startLimitError{unit: u.name, result: u.result}
	}
	for _, p := range u.cgroupProcs() {
		u.log("%s: Found left-over process %d (%s) in control group while starting unit. Ignoring.", u.name, p.nsPID(u.h.ct), p.comm())
		u.log("This usually indicates unclean termination of a previous run, or service implementation deficiencies.")
	}
	u.starts = append(u.starts, now)
	u.collected = false
	if manual {
		u.nRestarts = 0
	}
	argv, _, err := parseExecStart(u.cfg.ExecStart[0], u.name, u.h.name, u.cfg.Environment)
	if err != nil {
		u.log("%s: %v", u.name, err)
		u.result = "resources"
		u.setState("failed", "failed")
		//lint:ignore ST1005 systemctl's own words, as operators see them
		return fmt.Errorf("Job for %s failed because of unavailable resources or another system error.", u.name)
	}
	u.result = "success"
	u.argv = argv
	main := w.spawn(u.h.ct, nil, argv, u.cgroup())
	main.stat = "Ssl"
	u.main = main
	u.execMainPID = main.nsPID(u.h.ct)
	u.execMainStart = now
	u.execMainStatus, u.execMainCode = 0, 0
	u.setState("active", "running")
	u.log("Started %s.", u.desc())
	main.onExit = append(main.onExit, func(code int, sig syscall.Signal) { u.mainExited(main, code, sig) })
	u.h.startProgram(u, main, argv)
	return nil
}

func exitStatusText(code int, sig syscall.Signal) string {
	if code >= 0 {
		names := map[int]string{0: "SUCCESS", 1: "FAILURE", 2: "INVALIDARGUMENT", 3: "NOTIMPLEMENTED", 4: "NOPERMISSION", 5: "NOTINSTALLED", 6: "NOTCONFIGURED", 7: "NOTRUNNING"}
		if n, ok := names[code]; ok {
			return fmt.Sprintf("code=exited, status=%d/%s", code, n)
		}
		return fmt.Sprintf("code=exited, status=%d", code)
	}
	return fmt.Sprintf("code=killed, status=%d/%s", int(sig), signalName(sig))
}

// mainExited handles the end of the unit's main process (mu held).
func (u *unit) mainExited(p *proc, code int, sig syscall.Signal) {
	w := u.w()
	if u.main != p {
		return
	}
	u.main = nil
	if code >= 0 {
		u.execMainStatus, u.execMainCode = code, 1
	} else {
		u.execMainStatus, u.execMainCode = int(sig), 2
	}
	clean := code == 0 || code < 0 && (sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGHUP || sig == syscall.SIGPIPE)
	if !clean || !u.stopping {
		u.log("%s: Main process exited, %s", u.name, exitStatusText(code, sig))
	}
	if u.stopping {
		u.checkStopDone()
		return
	}
	if !clean {
		if code >= 0 {
			u.result = "exit-code"
		} else {
			u.result = "signal"
		}
	}
	// The rest of the cgroup goes with the main process (KillMode decides who).
	if u.cfg.KillMode == "control-group" || u.cfg.KillMode == "mixed" {
		for _, q := range u.cgroupProcs() {
			w.signal(q, syscall.SIGTERM)
		}
	}
	restart := false
	switch u.cfg.Restart {
	case "always":
		restart = true
	case "on-failure":
		restart = !clean
	case "on-success":
		restart = clean
	case "on-abnormal", "on-abort":
		restart = code < 0 && !clean
	}
	if !clean {
		u.log("%s: Failed with result '%s'.", u.name, u.result)
	}
	if !restart {
		if clean {
			u.log("%s: Deactivated successfully.", u.name)
			u.setState("inactive", "dead")
			u.collect()
		} else {
			u.setState("failed", "failed")
		}
		return
	}
	u.setState("activating", "auto-restart")
	u.restartTimer = w.after(u.cfg.RestartSec, func() {
		u.nRestarts++
		u.log("%s: Scheduled restart job, restart counter is at %d.", u.name, u.nRestarts)
		if u.active == "activating" && u.sub == "auto-restart" {
			u.log("Stopped %s.", u.desc())
			u.active = "inactive" // let start run
			if err := u.start(false); err != nil {
				return
			}
		}
	})
}

// stop begins stopping the unit (mu held); the caller waits until stopDone().
func (u *unit) stop() {
	w := u.w()
	switch {
	case u.active == "inactive" || u.active == "failed":
		return
	case u.active == "activating" && u.sub == "auto-restart":
		// systemd 252 goes straight to dead: a stop ends the loop as a clean stop.
		w.stopTimer(u.restartTimer)
		u.setState("inactive", "dead")
		u.log("Stopped %s.", u.desc())
		u.collect()
		return
	case u.stopping:
		return
	}
	u.stopping = true
	u.setState("deactivating", "stop-sigterm")
	u.log("Stopping %s...", u.desc())
	targets := u.cgroupProcs()
	if u.cfg.KillMode != "control-group" {
		targets = nil
		if u.main != nil {
			targets = []*proc{u.main}
		}
	}
	if u.cfg.KillMode == "none" {
		targets = nil
	}
	for _, p := range targets {
		w.signal(p, syscall.SIGTERM)
	}
	if !u.stopping {
		return
	}
	u.stopTimer = w.after(u.cfg.TimeoutStopSec, func() {
		if !u.stopping {
			return
		}
		u.log("%s: State 'stop-sigterm' timed out. Killing.", u.name)
		u.sigkillAll()
		if !u.stopping {
			return
		}
		u.setState("deactivating", "stop-sigkill")
		u.stopTimer = w.after(u.cfg.TimeoutStopSec, func() {
			if !u.stopping {
				return
			}
			u.log("%s: Processes still around after final SIGKILL. Entering failed mode.", u.name)
			u.result = "timeout"
			u.finishStop()
		})
	})
	u.checkStopDone()
}

func (u *unit) sigkillAll() {
	w := u.w()
	victims := u.cgroupProcs()
	if u.cfg.KillMode == "process" || u.cfg.KillMode == "none" {
		victims = nil
		if u.main != nil {
			victims = []*proc{u.main}
		}
	}
	for _, p := range victims {
		u.log("%s: Killing process %d (%s) with signal SIGKILL.", u.name, p.nsPID(u.h.ct), p.comm())
		w.signal(p, syscall.SIGKILL)
	}
}

// checkStopDone completes a stop once nothing that must die is left (mu held).
func (u *unit) checkStopDone() {
	if !u.stopping || u.main != nil {
		return
	}
	var rest, left []*proc
	for _, p := range u.cgroupProcs() {
		if p.leftover {
			left = append(left, p)
		} else {
			rest = append(rest, p)
		}
	}
	switch u.cfg.KillMode {
	case "process", "none":
		rest = append(rest, left...)
		left = nil
		for _, p := range rest {
			u.log("%s: Unit process %d (%s) remains running after unit stopped.", u.name, p.nsPID(u.h.ct), p.comm())
		}
	case "mixed":
		if len(rest) > 0 && u.sub == "stop-sigterm" {
			u.setState("deactivating", "stop-sigkill")
			u.sigkillAll()
			rest = u.cgroupProcs()
		}
		if len(rest) > 0 {
			return
		}
	default:
		if len(rest) > 0 {
			return
		}
	}
	for _, p := range left {
		u.log("%s: Unit process %d (%s) remains running after unit stopped.", u.name, p.nsPID(u.h.ct), p.comm())
	}
	u.finishStop()
}

func (u *unit) finishStop() {
	u.w().stopTimer(u.stopTimer)
	u.stopping = false
	if u.result != "success" {
		if u.result == "timeout" {
			u.log("%s: Failed with result 'timeout'.", u.name)
		}
		u.setState("failed", "failed")
	} else {
		u.log("%s: Deactivated successfully.", u.name)
		u.setState("inactive", "dead")
	}
	u.log("Stopped %s.", u.desc())
	u.collect()
}

// onProcExit is told about every process that ended on this host (mu held).
func (sd *systemd) onProcExit(p *proc) {
	for _, u := range sd.units {
		switch {
		case p.cgroup != u.cgroup():
		case u.stopping:
			u.checkStopDone()
		default:
			u.collect() // the last left-over process gone: systemd collects the unit
		}
	}
}

func (u *unit) stopped() bool { return !u.stopping && (u.active == "inactive" || u.active == "failed") }

// resetFailed clears the failed state and the start rate limit (mu held).
func (u *unit) resetFailed() {
	u.starts = nil
	if u.active == "failed" {
		u.setState("inactive", "dead")
	}
	u.result = "success"
	u.nRestarts = 0
	u.collect()
}
