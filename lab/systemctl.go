package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const tsLayout = "Mon 2006-01-02 15:04:05 MST"

func normUnit(n string) string {
	if n == "" || strings.Contains(n, ".") && (strings.HasSuffix(n, ".service") || strings.HasSuffix(n, ".target") || strings.HasSuffix(n, ".socket") || strings.HasSuffix(n, ".timer") || strings.HasSuffix(n, ".scope") || strings.HasSuffix(n, ".slice") || strings.HasSuffix(n, ".mount")) {
		return n
	}
	return n + ".service"
}

var allProps = []string{"Type", "Restart", "RestartUSec", "TimeoutStopUSec", "ExecMainStartTimestamp", "ExecMainPID", "ExecMainCode", "ExecMainStatus",
	"MainPID", "ControlGroup", "ExecStart", "KillMode", "NRestarts", "Result", "Id", "Names", "Description", "LoadState", "ActiveState", "SubState",
	"FragmentPath", "DropInPaths", "UnitFileState", "ActiveEnterTimestamp", "StartLimitIntervalUSec", "StartLimitBurst", "NeedDaemonReload", "Environment"}

func (e *cmdEnv) systemctl(ctx context.Context, args []string) int {
	var props []string
	var units []string
	verb := ""
	valueOnly, quiet, runtime := false, false, false
	sigName := "TERM"
	whom := "all"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-p" || a == "--property":
			if i+1 >= len(args) {
				fmt.Fprintln(e.stderr, "systemctl: option requires an argument -- 'p'")
				return 1
			}
			i++
			props = append(props, strings.Split(args[i], ",")...)
		case strings.HasPrefix(a, "--property="):
			props = append(props, strings.Split(strings.TrimPrefix(a, "--property="), ",")...)
		case strings.HasPrefix(a, "-p") && len(a) > 2:
			props = append(props, strings.Split(a[2:], ",")...)
		case a == "-s" || a == "--signal":
			if i+1 >= len(args) {
				fmt.Fprintln(e.stderr, "systemctl: option requires an argument -- 's'")
				return 1
			}
			i++
			sigName = args[i]
		case strings.HasPrefix(a, "--signal="):
			sigName = strings.TrimPrefix(a, "--signal=")
		case strings.HasPrefix(a, "--kill-whom=") || strings.HasPrefix(a, "--kill-who="):
			_, whom, _ = strings.Cut(a, "=")
		case a == "--value":
			valueOnly = true
		case a == "-q" || a == "--quiet":
			quiet = true
		case a == "--runtime":
			runtime = true
		case a == "--no-pager" || a == "--no-block" || a == "--no-legend" || a == "--plain" || a == "-l" || a == "--full" || a == "--all" || a == "-a" || a == "--no-ask-password" || a == "--system":
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(e.stderr, "systemctl: unrecognized option '%s'\n", a)
			return 1
		case verb == "":
			verb = a
		default:
			units = append(units, normUnit(a))
		}
	}
	h := e.h
	w := h.w
	needUnit := func() bool {
		if len(units) == 0 {
			fmt.Fprintf(e.stderr, "Too few arguments.\n")
			return false
		}
		return true
	}
	switch verb {
	case "show":
		if !needUnit() {
			return 1
		}
		if len(props) == 0 {
			props = allProps
		}
		for i, un := range units {
			d := h.readDiskUnit(un)
			w.lock()
			vals := h.showProps(d, props)
			w.unlock()
			if i > 0 {
				fmt.Fprintln(e.stdout)
			}
			for _, kv := range vals {
				if valueOnly {
					fmt.Fprintln(e.stdout, kv[1])
				} else {
					fmt.Fprintf(e.stdout, "%s=%s\n", kv[0], kv[1])
				}
			}
		}
		return 0
	case "start", "stop", "restart", "try-restart", "reload-or-restart":
		if !needUnit() {
			return 1
		}
		code := 0
		for _, un := range units {
			if c := e.control(ctx, verb, un); c != 0 {
				code = c
				if c == exitSignalled {
					return c
				}
			}
		}
		w.lock()
		drop := h.lab.faults.sshDropArmed && e.drop != nil
		if drop {
			h.lab.faults.sshDropArmed = false
		}
		w.unlock()
		if drop {
			e.dropped = true
			e.drop()
			return exitSignalled
		}
		return code
	case "daemon-reload", "daemon-reexec":
		ds := map[string]diskUnit{}
		w.lock()
		var names []string
		for n := range h.sd.units {
			names = append(names, n)
		}
		w.unlock()
		for _, n := range names {
			ds[n] = h.readDiskUnit(n)
		}
		w.lock()
		for _, d := range ds {
			h.sd.load(d)
		}
		drop := e.drop != nil && h.lab.faults.takeDrop("reload")
		w.unlock()
		if drop {
			e.dropped = true
			e.drop()
			return exitSignalled
		}
		return 0
	case "reset-failed":
		w.lock()
		for _, un := range units {
			if u := h.sd.units[un]; u != nil {
				u.resetFailed()
			}
		}
		if len(units) == 0 {
			for _, u := range h.sd.units {
				u.resetFailed()
			}
		}
		w.unlock()
		return 0
	case "is-active", "is-failed":
		if !needUnit() {
			return 1
		}
		code := 1
		for _, un := range units {
			d := h.readDiskUnit(un)
			w.lock()
			s := h.unitStatus(d)
			w.unlock()
			state := s.ActiveState
			if !quiet {
				fmt.Fprintln(e.stdout, state)
			}
			if verb == "is-active" && state == "active" || verb == "is-failed" && state == "failed" {
				code = 0
			}
		}
		if verb == "is-active" && code != 0 {
			code = 3
		}
		return code
	case "is-enabled":
		if !needUnit() {
			return 1
		}
		code := 1
		for _, un := range units {
			state := h.unitFileState(h.readDiskUnit(un))
			if state == "" {
				fmt.Fprintf(e.stderr, "Failed to get unit file state for %s: No such file or directory\n", un)
				return 1
			}
			if !quiet {
				fmt.Fprintln(e.stdout, state)
			}
			if enabledState(state) {
				code = 0
			}
		}
		return code
	case "enable", "disable":
		return e.enableVerb(verb, units, runtime, quiet)
	case "cat":
		if !needUnit() {
			return 1
		}
		code := 0
		for i, un := range units {
			d := h.readDiskUnit(un)
			if !d.exists {
				fmt.Fprintf(e.stderr, "No files found for %s.\n", un)
				code = 1
				continue
			}
			if i > 0 {
				fmt.Fprintln(e.stdout)
			}
			w.lock()
			u := h.sd.refresh(h.sd.units[un], d)
			stale := u != nil && u.needReload(d)
			w.unlock()
			if stale {
				fmt.Fprintf(e.stderr, "Warning: %s changed on disk, the version systemd has loaded is outdated.\nThis output shows the current version of the unit's original fragment and drop-in files.\nIf fragments or drop-ins were added or removed, they are not properly reflected in this output.\nRun 'systemctl daemon-reload' to reload units.\n", un)
			}
			fmt.Fprintf(e.stdout, "# %s\n%s", d.fragPath, ensureNL(d.fragText))
			for _, di := range d.dropIns {
				fmt.Fprintf(e.stdout, "\n# %s\n%s", di[0], ensureNL(di[1]))
			}
		}
		return code
	case "kill":
		if !needUnit() {
			return 1
		}
		sig, ok := parseSignal(sigName)
		if !ok {
			fmt.Fprintf(e.stderr, "Failed to parse signal string %s.\n", sigName)
			return 1
		}
		w.lock()
		defer w.unlock()
		for _, un := range units {
			u := h.sd.units[un]
			if u == nil || !u.isLoaded {
				fmt.Fprintf(e.stderr, "Failed to kill unit %s: Unit %s not loaded.\n", un, un)
				return 1
			}
			targets := u.cgroupProcs()
			if whom == "main" {
				targets = nil
				if u.main != nil {
					targets = []*proc{u.main}
				}
			}
			for _, p := range targets {
				w.signal(p, sig)
			}
		}
		return 0
	case "status":
		if !needUnit() {
			return 1
		}
		return e.status(units[0])
	case "list-units":
		w.lock()
		for _, u := range h.sd.units {
			fmt.Fprintf(e.stdout, "  %-30s %-7s %-8s %-8s %s\n", u.name, u.loadState(), u.active, u.sub, u.cfg.Description)
		}
		w.unlock()
		return 0
	case "":
		fmt.Fprintln(e.stderr, "systemctl: missing verb (the lab has no unit list view)")
		return 1
	}
	fmt.Fprintf(e.stderr, "Unknown command verb '%s'.\n", verb)
	return 1
}

func ensureNL(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

// control runs start/stop/restart for one unit, blocking like systemctl does.
func (e *cmdEnv) control(ctx context.Context, verb, name string) int {
	h, w := e.h, e.h.w
	d := h.readDiskUnit(name)
	w.lock()
	u := h.sd.get(d)
	stale := u.needReload(d)
	w.unlock()
	if stale {
		fmt.Fprintf(e.stderr, "Warning: The unit file, source configuration file or drop-ins of %s changed on disk. Run 'systemctl daemon-reload' to reload units.\n", name)
	}
	if !u.isLoaded && !d.exists {
		fmt.Fprintf(e.stderr, "Failed to %s %s: Unit %s not found.\n", verb, name, name)
		return 5
	}
	if verb == "try-restart" {
		w.lock()
		act := u.active
		w.unlock()
		if act != "active" && act != "activating" {
			return 0
		}
	}
	if verb != "start" {
		w.lock()
		u.stop()
		w.unlock()
		if err := e.waitUnit(ctx, u, func() bool { return u.stopped() }); err != nil {
			return exitSignalled
		}
		if verb == "stop" {
			return 0
		}
	}
	w.lock()
	err := u.start(true)
	w.unlock()
	var sl *startLimitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &sl) && sl.result != "start-limit-hit":
		fmt.Fprintf(e.stderr, "Job for %s failed because the control process exited with error code.\nSee \"systemctl status %s\" and \"journalctl -xeu %s\" for details.\n", name, name, name)
		return 1
	case errors.As(err, &sl):
		fmt.Fprintf(e.stderr, "Job for %s failed because start of the service was attempted too often.\nSee \"systemctl status %s\" and \"journalctl -xeu %s\" for details.\nTo force a start use \"systemctl reset-failed %s\" followed by \"systemctl start %s\" again.\n", name, name, name, name, name)
		return 1
	default:
		if strings.HasPrefix(err.Error(), "Job for") {
			fmt.Fprintf(e.stderr, "%v\nSee \"systemctl status %s\" and \"journalctl -xeu %s\" for details.\n", err, name, name)
		} else {
			fmt.Fprintf(e.stderr, "Failed to %s %s: %v\nSee system logs and 'systemctl status %s' for details.\n", verb, name, err, name)
		}
		return 1
	}
}

// waitUnit waits (without the lock) until cond (evaluated with the lock) holds or ctx ends.
func (e *cmdEnv) waitUnit(ctx context.Context, u *unit, cond func() bool) error {
	w := e.h.w
	for {
		w.lock()
		ok := cond()
		ch := w.changed
		closed := w.closed
		w.mu.Unlock()
		if ok {
			return nil
		}
		if closed {
			return errors.New("lab closed")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func fmtTS(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(tsLayout)
}

// showProps renders the requested properties (mu held).
func (h *SimHost) showProps(d diskUnit, props []string) [][2]string {
	u := h.sd.refresh(h.sd.units[d.name], d)
	if u == nil && d.exists {
		u = h.sd.load(d) // systemd loads a unit when it is referenced
	}
	var out [][2]string
	for _, p := range props {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, ok := h.prop(u, d, p)
		if ok {
			out = append(out, [2]string{p, v})
		}
	}
	return out
}

func (h *SimHost) prop(u *unit, d diskUnit, p string) (string, bool) {
	if u == nil {
		switch p {
		case "Id", "Names":
			return d.name, true
		case "LoadState":
			return "not-found", true
		case "ActiveState":
			return "inactive", true
		case "SubState":
			return "dead", true
		case "Result":
			return "success", true
		case "NRestarts", "MainPID", "ExecMainPID", "ExecMainStatus", "ExecMainCode":
			return "0", true
		case "NeedDaemonReload":
			return "no", true
		case "UnitFileState":
			return "", true
		case "KillMode":
			return "control-group", true
		case "Restart":
			return "no", true
		case "RestartUSec":
			return "100ms", true
		case "StartLimitBurst":
			return "5", true
		}
		if _, known := propKnown[p]; known {
			return "", true
		}
		return "", false
	}
	c := u.cfg
	switch p {
	case "Id", "Names":
		return u.name, true
	case "Description":
		return c.Description, true
	case "LoadState":
		return u.loadState(), true
	case "ActiveState":
		return u.active, true
	case "SubState":
		return u.sub, true
	case "Result":
		return u.result, true
	case "NRestarts":
		return strconv.Itoa(u.nRestarts), true
	case "MainPID":
		if u.main != nil {
			return strconv.Itoa(u.main.nsPID(h.ct)), true
		}
		return "0", true
	case "ExecMainPID":
		return strconv.Itoa(u.execMainPID), true
	case "ExecMainStatus":
		return strconv.Itoa(u.execMainStatus), true
	case "ExecMainCode":
		return strconv.Itoa(u.execMainCode), true
	case "NeedDaemonReload":
		if u.needReload(d) {
			return "yes", true
		}
		return "no", true
	case "FragmentPath":
		return u.loaded.fragPath, true
	case "DropInPaths":
		var ps []string
		for _, di := range u.loaded.dropIns {
			ps = append(ps, di[0])
		}
		return strings.Join(ps, " "), true
	case "ControlGroup":
		if u.active != "inactive" && u.active != "failed" || len(u.cgroupProcs()) > 0 {
			return u.cgroup(), true
		}
		return "", true
	case "KillMode":
		return c.KillMode, true
	case "Restart":
		return c.Restart, true
	case "RestartUSec":
		return formatSystemdDuration(c.RestartSec), true
	case "TimeoutStopUSec":
		return formatSystemdDuration(c.TimeoutStopSec), true
	case "StartLimitBurst":
		return strconv.Itoa(c.StartLimitBurst), true
	case "StartLimitIntervalUSec":
		return formatSystemdDuration(c.StartLimitInterval), true
	case "Type":
		return c.Type, true
	case "UnitFileState":
		return h.unitFileState(d), true
	case "Environment":
		return strings.Join(c.Environment, " "), true
	case "ExecMainStartTimestamp":
		return fmtTS(u.execMainStart), true
	case "ActiveEnterTimestamp":
		return fmtTS(u.activeEnter), true
	case "ExecStart":
		if len(c.ExecStart) == 0 {
			return "", true
		}
		argv, _, err := parseExecStart(c.ExecStart[0], u.name, h.name, c.Environment)
		if err != nil {
			return "", true
		}
		pid := "0"
		if u.main != nil {
			pid = strconv.Itoa(u.main.nsPID(h.ct))
		}
		return fmt.Sprintf("{ path=%s ; argv[]=%s ; ignore_errors=no ; start_time=[%s] ; stop_time=[n/a] ; pid=%s ; code=(null) ; status=0/0 }",
			argv[0], strings.Join(argv, " "), fmtTS(u.execMainStart), pid), true
	}
	if _, known := propKnown[p]; known {
		return "", true
	}
	return "", false
}

var propKnown = map[string]struct{}{}

func init() {
	for _, p := range allProps {
		propKnown[p] = struct{}{}
	}
}

// status prints a short `systemctl status` view.
func (e *cmdEnv) status(name string) int {
	h, w := e.h, e.h.w
	d := h.readDiskUnit(name)
	w.lock()
	u := h.sd.units[name]
	if u == nil || !u.isLoaded {
		w.unlock()
		fmt.Fprintf(e.stderr, "Unit %s could not be found.\n", name)
		return 4
	}
	dot := "○"
	switch u.active {
	case "active":
		dot = "●"
	case "failed":
		dot = "×"
	}
	fmt.Fprintf(e.stdout, "%s %s\n", dot, u.desc())
	fileState := h.unitFileState(d)
	if fileState != "static" {
		fileState += "; preset: enabled"
	}
	fmt.Fprintf(e.stdout, "     Loaded: %s (%s; %s)\n", u.loadState(), u.loaded.fragPath, fileState)
	if len(u.loaded.dropIns) > 0 {
		fmt.Fprintf(e.stdout, "    Drop-In: %s\n", u.loaded.dropIns[0][0])
	}
	state := fmt.Sprintf("%s (%s)", u.active, u.sub)
	if u.result != "success" {
		state += fmt.Sprintf(" (Result: %s)", u.result)
	}
	fmt.Fprintf(e.stdout, "     Active: %s since %s\n", state, fmtTS(u.activeEnter))
	if u.main != nil {
		fmt.Fprintf(e.stdout, "   Main PID: %d (%s)\n", u.main.nsPID(h.ct), u.main.comm())
	}
	procs := u.cgroupProcs()
	if len(procs) > 0 {
		fmt.Fprintf(e.stdout, "     CGroup: %s\n", u.cgroup())
		for _, p := range procs {
			fmt.Fprintf(e.stdout, "             └─%d %s\n", p.nsPID(h.ct), strings.Join(p.args, " "))
		}
	}
	active := u.active
	stale := u.needReload(d)
	w.unlock()
	if stale {
		fmt.Fprintf(e.stdout, "\nWarning: The unit file, source configuration file or drop-ins of %s changed on disk. Run 'systemctl daemon-reload' to reload units.\n", name)
	}
	fmt.Fprintln(e.stdout)
	for _, en := range h.journal.query(name, time.Time{}, 10) {
		fmt.Fprintln(e.stdout, formatEntry(en, h.name, "short"))
	}
	if active == "active" {
		return 0
	}
	return 3
}

// journalctl supports -u UNIT, -k (the kernel's messages: the NVIDIA driver's Xid lines), -n N,
// --since, -o cat|short|short-iso|short-precise, --no-pager, -q.
func (e *cmdEnv) journalctl(args []string) int {
	unitName := ""
	kernel := false
	n := -1
	var since time.Time
	format := "short"
	quiet := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, bool) {
			if i+1 >= len(args) {
				fmt.Fprintf(e.stderr, "journalctl: option '%s' requires an argument\n", a)
				return "", false
			}
			i++
			return args[i], true
		}
		var v string
		var ok bool
		switch {
		case a == "-u" || a == "--unit":
			if v, ok = next(); !ok {
				return 1
			}
			unitName = normUnit(v)
		case strings.HasPrefix(a, "--unit="):
			unitName = normUnit(strings.TrimPrefix(a, "--unit="))
		case strings.HasPrefix(a, "-u") && len(a) > 2:
			unitName = normUnit(a[2:])
		case a == "-n" || a == "--lines":
			if v, ok = next(); !ok {
				return 1
			}
			if n, ok = parseLines(v); !ok {
				fmt.Fprintf(e.stderr, "Failed to parse lines '%s'.\n", v)
				return 1
			}
		case strings.HasPrefix(a, "--lines="):
			if n, ok = parseLines(strings.TrimPrefix(a, "--lines=")); !ok {
				fmt.Fprintf(e.stderr, "Failed to parse lines '%s'.\n", a)
				return 1
			}
		case strings.HasPrefix(a, "-n") && len(a) > 2:
			if n, ok = parseLines(a[2:]); !ok {
				fmt.Fprintf(e.stderr, "Failed to parse lines '%s'.\n", a[2:])
				return 1
			}
		case a == "-S" || a == "--since":
			if v, ok = next(); !ok {
				return 1
			}
			t, err := parseSince(v)
			if err != nil {
				fmt.Fprintf(e.stderr, "Failed to parse timestamp: %s\n", v)
				return 1
			}
			since = t
		case strings.HasPrefix(a, "--since="):
			t, err := parseSince(strings.TrimPrefix(a, "--since="))
			if err != nil {
				fmt.Fprintf(e.stderr, "Failed to parse timestamp: %s\n", strings.TrimPrefix(a, "--since="))
				return 1
			}
			since = t
		case a == "-o" || a == "--output":
			if v, ok = next(); !ok {
				return 1
			}
			format = v
		case strings.HasPrefix(a, "--output="):
			format = strings.TrimPrefix(a, "--output=")
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			format = a[2:]
		case a == "-q" || a == "--quiet":
			quiet = true
		case a == "-k" || a == "--dmesg":
			kernel = true
		case a == "-k" || a == "--dmesg":
			kernel = true
		case a == "--no-pager" || a == "-b" || a == "--boot" || a == "-x" || a == "--catalog" || a == "-e" || a == "--pager-end" || a == "--no-hostname" || a == "-a" || a == "--all" || a == "--utc":
		case a == "-f" || a == "--follow":
			fmt.Fprintln(e.stderr, "journalctl: --follow is not supported by the lab")
			return 1
		default:
			fmt.Fprintf(e.stderr, "journalctl: unrecognized option '%s'\n", a)
			return 1
		}
	}
	switch format {
	case "short", "short-iso", "short-precise", "short-iso-precise", "cat", "short-unix":
	default:
		fmt.Fprintf(e.stderr, "Unknown output format '%s'.\n", format)
		return 1
	}
	entries := e.h.journal.query(unitName, since, -1)
	if kernel {
		var ks []journalEntry
		for _, en := range entries {
			if en.Ident == "kernel" && en.Unit == "" {
				ks = append(ks, en)
			}
		}
		entries = ks
	}
	if n >= 0 && len(entries) > n {
		entries = entries[len(entries)-n:]
	}
	if len(entries) == 0 && format != "cat" && !quiet {
		fmt.Fprintln(e.stdout, "-- No entries --")
		return 0
	}
	for _, en := range entries {
		fmt.Fprintln(e.stdout, formatEntry(en, e.h.name, format))
	}
	return 0
}

func parseLines(s string) (int, bool) {
	if s == "all" {
		return -1, true
	}
	n, err := strconv.Atoi(strings.TrimPrefix(s, "+"))
	return n, err == nil && n >= 0
}

// parseSince accepts @EPOCH[.FRACTION], "YYYY-MM-DD HH:MM:SS[.frac]", "YYYY-MM-DD", "now",
// "today" and relative "-30s"/"-5min" (UTC, like the lab's hosts).
func parseSince(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "now":
		return time.Now(), nil
	case "today":
		y, m, d := time.Now().UTC().Date()
		return time.Date(y, m, d, 0, 0, 0, 0, time.UTC), nil
	}
	if v, ok := strings.CutPrefix(s, "@"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return time.Time{}, err
		}
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)), nil
	}
	if strings.HasPrefix(s, "-") {
		d, err := parseSystemdDuration(strings.TrimSpace(s[1:]))
		if err != nil {
			return time.Time{}, err
		}
		return time.Now().Add(-d), nil
	}
	s = strings.TrimSuffix(s, " UTC")
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04:05Z07:00", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid timestamp %q", s)
}

func formatEntry(en journalEntry, host, format string) string {
	t := en.At.UTC()
	var ts string
	switch format {
	case "cat":
		return en.Msg
	case "short-iso":
		ts = t.Format("2006-01-02T15:04:05-0700")
	case "short-iso-precise":
		ts = t.Format("2006-01-02T15:04:05.000000-0700")
	case "short-precise":
		ts = t.Format("Jan 02 15:04:05.000000")
	case "short-unix":
		ts = fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
	default:
		ts = t.Format("Jan 02 15:04:05")
	}
	if en.PID == 0 { // the kernel's lines carry no pid
		return fmt.Sprintf("%s %s %s: %s", ts, host, en.Ident, en.Msg)
	}
	return fmt.Sprintf("%s %s %s[%d]: %s", ts, host, en.Ident, en.PID, en.Msg)
}

var _ = syscall.SIGTERM
