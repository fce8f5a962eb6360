// Package systemdsuite is a conformance suite for systemd as the ops layer uses it: the same
// sequence of systemctl and journalctl calls, run against the lab's emulation and against a real
// systemd 252, must give the same properties, states, state transitions and journal lines. The
// expectations are what systemd 252 does (Debian 12); where the lab differed, the lab was fixed.
// It imports nothing of opsbot; the caller adapts its client to Host.
//
// Differences that cannot matter to opsbot, and are therefore not checked:
//   - journal lines of the services' own programs (the lab simulates programs; only /bin/true,
//     /bin/false, sleep and the engines exist there) and systemd's "Consumed ... CPU time" lines;
//   - /proc/PID/cgroup lines of cgroup v1 hierarchies (a hybrid machine lists them before the
//     "0::" line): only the v2 line is compared, as ops reads it;
//   - NeedDaemonReload for a drop-in added to a directory systemd saw at its last reload (the
//     lab says "no", as systemd 252 does for a new directory; ops reloads after every write).
//
// Two facts of systemd 252 the suite pins because they surprise: an inactive unit is
// garbage-collected at once, so it shows as freshly loaded (NRestarts 0, Result success,
// ExecMain* 0) and an edit to it needs no reload; and a unit whose restarts hit the start limit
// keeps the failure's result (exit-code), start-limit-hit only replacing a success.
package systemdsuite

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Runner runs argv on the host (quoting it for a remote shell). A non-zero exit is not an
// error: err is for transport failures and for ctx ending.
type Runner interface {
	Run(ctx context.Context, stdin []byte, argv ...string) (stdout, stderr []byte, exit int, err error)
}

// Host is what the suite needs of a systemd host.
type Host struct {
	R Runner
	// WriteFile writes a file on the host (mode 0644), replacing it atomically.
	WriteFile func(ctx context.Context, path, text string) error
	// UnitDir is a directory systemd loads units from (/etc/systemd/system, /run/systemd/system).
	UnitDir string
	// Leftover prepares a unit with KillMode=process whose main process ends on SIGTERM while one
	// child process ignores it, and returns the unit's name; the suite starts and stops it.
	Leftover func(t *testing.T) string
}

// Run runs the suite against h.
func Run(t *testing.T, h Host) {
	t.Helper()
	s := &suite{h: h}
	t.Run("UnknownUnit", s.unknownUnit)
	t.Run("LoadStartStop", s.loadStartStop)
	t.Run("ReloadAndDropIns", s.reloadAndDropIns)
	t.Run("RestartLoop", s.restartLoop)
	t.Run("StartLimit", s.startLimit)
	t.Run("OneShotFailure", s.oneShotFailure)
	t.Run("JournalQueries", s.journalQueries)
	t.Run("EnableDisable", s.enableDisable)
	if h.Leftover != nil {
		t.Run("KillModeProcessLeftover", s.leftover)
	}
}

type suite struct{ h Host }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

type result struct {
	out, err string
	code     int
}

func (s *suite) run(t *testing.T, argv ...string) result {
	t.Helper()
	out, errOut, code, err := s.h.R.Run(ctx(t), nil, argv...)
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return result{string(out), string(errOut), code}
}

func (s *suite) must(t *testing.T, argv ...string) string {
	t.Helper()
	r := s.run(t, argv...)
	if r.code != 0 {
		t.Fatalf("%s: exit %d: %s", strings.Join(argv, " "), r.code, r.err)
	}
	return r.out
}

func (s *suite) write(t *testing.T, name, text string) string {
	t.Helper()
	p := s.h.UnitDir + "/" + name
	if err := s.h.WriteFile(ctx(t), p, text); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	return p
}

// show returns the properties of unit (systemctl show -p).
func (s *suite) show(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out := s.must(t, "systemctl", "show", "-p", strings.Join(props, ","), unit)
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("systemctl show %s: line %q", unit, l)
		}
		m[k] = v
	}
	return m
}

// expect checks the named properties; "*" wants any non-empty value, "+N" a number above 0.
func expect(t *testing.T, what string, got map[string]string, want map[string]string) {
	t.Helper()
	var bad []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			bad = append(bad, k+" missing")
		case w == "*" && g != "":
		case w == "+N":
			if n, err := strconv.Atoi(g); err != nil || n <= 0 {
				bad = append(bad, fmt.Sprintf("%s=%q, want a number > 0", k, g))
			}
		case g != w:
			bad = append(bad, fmt.Sprintf("%s=%q, want %q", k, g, w))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Fatalf("%s: %s", what, strings.Join(bad, "; "))
	}
}

// waitShow polls the properties until cond holds (10 s at most) and returns them.
func (s *suite) waitShow(t *testing.T, what, unit string, cond func(map[string]string) bool, props ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := s.show(t, unit, props...)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not reached in 10s; last %v", unit, what, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// journal is the unit's journal, -o cat.
func (s *suite) journal(t *testing.T, unit string) []string {
	t.Helper()
	out := s.must(t, "journalctl", "-u", unit, "-o", "cat", "--no-pager")
	out = strings.TrimSuffix(out, "\n")
	if out == "" || out == "-- No entries --" {
		return nil
	}
	return strings.Split(out, "\n")
}

// waitJournal waits until the unit's journal holds a line matching each pattern, in order.
func (s *suite) waitJournal(t *testing.T, unit string, patterns ...string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := s.journal(t, unit)
		i, missing := 0, ""
		for _, p := range patterns {
			re := regexp.MustCompile("^" + p + "$")
			for i < len(lines) && !re.MatchString(lines[i]) {
				i++
			}
			if i == len(lines) {
				missing = p
				break
			}
			i++
		}
		if missing == "" {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal of %s: no line matching %q (in order) within 10s:\n%s", unit, missing, strings.Join(lines, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var stateProps = []string{"LoadState", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "ExecMainPID",
	"ExecMainCode", "ExecMainStatus", "NeedDaemonReload", "FragmentPath", "DropInPaths", "ControlGroup", "KillMode",
	"Restart", "RestartUSec"}

func (s *suite) unknownUnit(t *testing.T) {
	const u = "suite-nope.service"
	expect(t, "show of an unknown unit", s.show(t, u, stateProps...), map[string]string{
		"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "Result": "success",
		"NRestarts": "0", "MainPID": "0", "NeedDaemonReload": "no", "FragmentPath": "",
	})
	r := s.run(t, "systemctl", "start", u)
	if r.code != 5 || !strings.Contains(r.err, "Unit "+u+" not found.") {
		t.Errorf("start of an unknown unit: exit %d %q, want 5 and \"Unit %s not found.\"", r.code, r.err, u)
	}
	r = s.run(t, "systemctl", "cat", u)
	if r.code != 1 || !strings.Contains(r.err, "No files found for "+u+".") {
		t.Errorf("cat of an unknown unit: exit %d %q, want 1 and \"No files found for %s.\"", r.code, r.err, u)
	}
}

func (s *suite) loadStartStop(t *testing.T) {
	const u = "suite-run.service"
	p := s.write(t, u, "[Unit]\nDescription=suite service\n\n[Service]\nExecStart=/bin/sleep infinity\n")
	s.must(t, "systemctl", "daemon-reload")
	expect(t, "loaded, never started", s.show(t, u, stateProps...), map[string]string{
		"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": "0",
		"MainPID": "0", "ExecMainPID": "0", "ExecMainCode": "0", "ExecMainStatus": "0", "NeedDaemonReload": "no",
		"FragmentPath": p, "DropInPaths": "", "ControlGroup": "", "KillMode": "control-group", "Restart": "no",
		"RestartUSec": "100ms",
	})
	if out := s.must(t, "systemctl", "cat", u); !strings.HasPrefix(out, "# "+p+"\n[Unit]\nDescription=suite service\n") {
		t.Errorf("cat: %q", out)
	}
	s.must(t, "systemctl", "start", u)
	m := s.show(t, u, stateProps...)
	expect(t, "started", m, map[string]string{
		"ActiveState": "active", "SubState": "running", "Result": "success", "NRestarts": "0", "MainPID": "+N",
		"ExecMainCode": "0", "ControlGroup": "/system.slice/" + u,
	})
	if m["ExecMainPID"] != m["MainPID"] {
		t.Errorf("ExecMainPID %s, MainPID %s: want equal", m["ExecMainPID"], m["MainPID"])
	}
	if ts := s.show(t, u, "ExecMainStartTimestamp", "ActiveEnterTimestamp"); !regexp.MustCompile(`^\w{3} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \w+$`).MatchString(ts["ActiveEnterTimestamp"]) {
		t.Errorf("ActiveEnterTimestamp %q", ts["ActiveEnterTimestamp"])
	}
	procs := s.must(t, "cat", "/sys/fs/cgroup/system.slice/"+u+"/cgroup.procs")
	if strings.TrimSpace(procs) != m["MainPID"] {
		t.Errorf("cgroup.procs %q, want the main PID %s", procs, m["MainPID"])
	}
	s.must(t, "systemctl", "stop", u)
	expect(t, "stopped", s.show(t, u, stateProps...), map[string]string{
		"ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": "0", "MainPID": "0",
		"ExecMainPID": "0", "ExecMainCode": "0", "ExecMainStatus": "0", "ControlGroup": "",
	})
	// Debian's systemd 252 names a unit "UNIT - Description" in these lines.
	s.waitJournal(t, u, `Started suite-run\.service - suite service\.`, `Stopping suite-run\.service - suite service\.\.\.`,
		regexp.QuoteMeta(u)+`: Deactivated successfully\.`, `Stopped suite-run\.service - suite service\.`)
}

func (s *suite) reloadAndDropIns(t *testing.T) {
	const u = "suite-reload.service"
	unit := "[Service]\nExecStart=/bin/sleep infinity\n"
	p := s.write(t, u, unit)
	s.must(t, "systemctl", "daemon-reload")
	nr := func() string { return s.show(t, u, "NeedDaemonReload")["NeedDaemonReload"] }

	// An inactive unit is collected: it is read from disk again whenever it is referenced, so
	// an edit shows and starts without a reload.
	s.write(t, u, unit+"Environment=A=1\n")
	if got := s.show(t, u, "NeedDaemonReload", "Environment"); got["NeedDaemonReload"] != "no" || got["Environment"] != "A=1" {
		t.Errorf("inactive unit after an edit: %v, want NeedDaemonReload=no and the new Environment=A=1", got)
	}

	// A running unit stays loaded: an edit is flagged until daemon-reload, and commands warn.
	s.must(t, "systemctl", "start", u)
	s.write(t, u, unit+"Environment=A=2\n")
	if got := s.show(t, u, "NeedDaemonReload", "Environment"); got["NeedDaemonReload"] != "yes" || got["Environment"] != "A=1" {
		t.Errorf("running unit after an edit: %v, want NeedDaemonReload=yes and the loaded Environment=A=1", got)
	}
	warning := "Warning: The unit file, source configuration file or drop-ins of " + u + " changed on disk. Run 'systemctl daemon-reload' to reload units.\n"
	if r := s.run(t, "systemctl", "restart", u); r.code != 0 || r.err != warning {
		t.Errorf("restart of a changed unit: exit %d, stderr %q: want 0 and %q", r.code, r.err, warning)
	}
	s.must(t, "systemctl", "daemon-reload")
	if got := s.show(t, u, "NeedDaemonReload", "Environment"); got["NeedDaemonReload"] != "no" || got["Environment"] != "A=2" {
		t.Errorf("after daemon-reload: %v, want NeedDaemonReload=no and Environment=A=2", got)
	}

	// A drop-in in a new directory is not flagged (systemd 252); a changed or removed one is.
	dropIn := p + ".d/opsbot.conf"
	s.must(t, "mkdir", "-p", p+".d")
	s.write(t, u+".d/opsbot.conf", "[Service]\nExecStart=\nExecStart=/bin/sleep 1000\n")
	if got := s.show(t, u, "NeedDaemonReload", "DropInPaths"); got["NeedDaemonReload"] != "no" || got["DropInPaths"] != "" {
		t.Errorf("after adding a drop-in: %v, want NeedDaemonReload=no, no DropInPaths", got)
	}
	s.must(t, "systemctl", "daemon-reload")
	expect(t, "with a drop-in", s.show(t, u, stateProps...), map[string]string{"DropInPaths": dropIn, "NeedDaemonReload": "no"})
	if out := s.must(t, "systemctl", "cat", u); !strings.Contains(out, "\n# "+dropIn+"\n[Service]\nExecStart=\nExecStart=/bin/sleep 1000\n") {
		t.Errorf("cat with the drop-in: %q", out)
	}
	s.write(t, u+".d/opsbot.conf", "[Service]\nExecStart=\nExecStart=/bin/sleep 2000\n")
	if got := nr(); got != "yes" {
		t.Errorf("after editing the drop-in: NeedDaemonReload=%s, want yes", got)
	}
	s.must(t, "systemctl", "daemon-reload")
	s.must(t, "rm", "-f", dropIn)
	if got := nr(); got != "yes" {
		t.Errorf("after removing the drop-in: NeedDaemonReload=%s, want yes", got)
	}
	s.must(t, "systemctl", "daemon-reload")
	expect(t, "drop-in removed", s.show(t, u, stateProps...), map[string]string{"DropInPaths": "", "NeedDaemonReload": "no"})
	s.must(t, "systemctl", "stop", u)
}

func (s *suite) restartLoop(t *testing.T) {
	const u = "suite-loop.service"
	s.write(t, u, "[Unit]\nStartLimitIntervalSec=0\n\n[Service]\nExecStart=/bin/false\nRestart=always\nRestartSec=300ms\n")
	s.must(t, "systemctl", "daemon-reload")
	expect(t, "loaded", s.show(t, u, stateProps...), map[string]string{"Restart": "always", "RestartUSec": "300ms"})
	s.must(t, "systemctl", "start", u)
	loop := s.waitShow(t, "auto-restart", u, func(m map[string]string) bool { return m["SubState"] == "auto-restart" }, stateProps...)
	expect(t, "in the loop", loop, map[string]string{
		"ActiveState": "activating", "Result": "exit-code", "MainPID": "0", "ExecMainCode": "1", "ExecMainStatus": "1",
	})
	n0, _ := strconv.Atoi(loop["NRestarts"])
	later := s.waitShow(t, "NRestarts rising", u, func(m map[string]string) bool {
		n, _ := strconv.Atoi(m["NRestarts"])
		return n >= n0+2
	}, stateProps...)
	t.Logf("loop: %v -> NRestarts %s", loop["NRestarts"], later["NRestarts"])
	s.waitJournal(t, u, regexp.QuoteMeta(u)+`: Main process exited, code=exited, status=1/FAILURE`,
		regexp.QuoteMeta(u)+`: Failed with result 'exit-code'\.`,
		regexp.QuoteMeta(u)+`: Scheduled restart job, restart counter is at 1\.`,
		`Stopped `+regexp.QuoteMeta(u)+`\.`, `Started `+regexp.QuoteMeta(u)+`\.`,
		regexp.QuoteMeta(u)+`: Scheduled restart job, restart counter is at 2\.`)
	s.must(t, "systemctl", "stop", u)
	stopped := s.waitShow(t, "stopped", u, func(m map[string]string) bool { return m["SubState"] != "auto-restart" }, stateProps...)
	// A stop while waiting to restart ends the loop as a clean stop: inactive, result success,
	// the restart counter cleared.
	expect(t, "stopped while waiting to restart", stopped, map[string]string{
		"ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": "0", "MainPID": "0",
	})
}

func (s *suite) startLimit(t *testing.T) {
	const u = "suite-flappy.service"
	s.write(t, u, "[Unit]\nStartLimitBurst=3\nStartLimitIntervalSec=600\n\n[Service]\nExecStart=/bin/false\nRestart=always\nRestartSec=50ms\n")
	s.must(t, "systemctl", "daemon-reload")
	s.must(t, "systemctl", "start", u)
	m := s.waitShow(t, "failed", u, func(m map[string]string) bool { return m["ActiveState"] == "failed" }, stateProps...)
	// The first failure's result stays: start-limit-hit only replaces "success".
	expect(t, "at the start limit", m, map[string]string{"SubState": "failed", "Result": "exit-code", "NRestarts": "3", "MainPID": "0"})
	s.waitJournal(t, u, regexp.QuoteMeta(u)+`: Scheduled restart job, restart counter is at 3\.`,
		regexp.QuoteMeta(u)+`: Start request repeated too quickly\.`, regexp.QuoteMeta(u)+`: Failed with result 'exit-code'\.`,
		`Failed to start `+regexp.QuoteMeta(u)+`\.`)
	r := s.run(t, "systemctl", "start", u)
	if r.code != 1 || !strings.HasPrefix(r.err, "Job for "+u+" failed because the control process exited with error code.\n") {
		t.Errorf("start at the start limit: exit %d %q", r.code, r.err)
	}
	expect(t, "refused start", s.show(t, u, stateProps...), map[string]string{"ActiveState": "failed", "Result": "exit-code", "NRestarts": "3"})
	s.must(t, "systemctl", "reset-failed", u)
	expect(t, "after reset-failed", s.show(t, u, stateProps...), map[string]string{
		"ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": "0",
	})

	// A unit whose result was success when the limit hit says start-limit-hit.
	const v = "suite-limit.service"
	s.write(t, v, "[Unit]\nStartLimitBurst=2\nStartLimitIntervalSec=600\n\n[Service]\nExecStart=/bin/true\nRestart=always\nRestartSec=50ms\n")
	s.must(t, "systemctl", "daemon-reload")
	s.must(t, "systemctl", "start", v)
	m = s.waitShow(t, "failed", v, func(m map[string]string) bool { return m["ActiveState"] == "failed" }, stateProps...)
	expect(t, "start limit of a clean exit", m, map[string]string{"SubState": "failed", "Result": "start-limit-hit", "NRestarts": "2"})
	r = s.run(t, "systemctl", "start", v)
	if r.code != 1 || !strings.HasPrefix(r.err, "Job for "+v+" failed because start of the service was attempted too often.\n") {
		t.Errorf("start at the start limit: exit %d %q", r.code, r.err)
	}
	s.must(t, "systemctl", "reset-failed", v)
}

func (s *suite) oneShotFailure(t *testing.T) {
	const u = "suite-once.service"
	s.write(t, u, "[Service]\nExecStart=/bin/false\n")
	s.must(t, "systemctl", "daemon-reload")
	s.must(t, "systemctl", "start", u)
	m := s.waitShow(t, "failed", u, func(m map[string]string) bool { return m["ActiveState"] == "failed" }, stateProps...)
	expect(t, "failed once", m, map[string]string{"SubState": "failed", "Result": "exit-code", "NRestarts": "0",
		"ExecMainCode": "1", "ExecMainStatus": "1", "MainPID": "0"})
	s.waitJournal(t, u, `Started `+regexp.QuoteMeta(u)+`\.`, regexp.QuoteMeta(u)+`: Main process exited, code=exited, status=1/FAILURE`,
		regexp.QuoteMeta(u)+`: Failed with result 'exit-code'\.`)
	s.must(t, "systemctl", "reset-failed", u)
	expect(t, "after reset-failed", s.show(t, u, stateProps...), map[string]string{"ActiveState": "inactive", "Result": "success"})
}

// cgroupV2 is the "0::" line of /proc/PID/cgroup without its prefix.
func (s *suite) cgroupV2(t *testing.T, pid string) string {
	t.Helper()
	for _, l := range strings.Split(s.must(t, "cat", "/proc/"+pid+"/cgroup"), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

func (s *suite) leftover(t *testing.T) {
	u := s.h.Leftover(t)
	s.must(t, "systemctl", "start", u)
	m := s.waitShow(t, "running", u, func(m map[string]string) bool { return m["SubState"] == "running" }, stateProps...)
	expect(t, "started", m, map[string]string{"KillMode": "process", "ControlGroup": "/system.slice/" + u})
	main := m["MainPID"]
	procs := func() []string {
		return strings.Fields(s.must(t, "cat", "/sys/fs/cgroup/system.slice/"+u+"/cgroup.procs"))
	}
	var before []string
	deadline := time.Now().Add(10 * time.Second)
	for len(before) < 2 {
		if before = procs(); len(before) < 2 && time.Now().After(deadline) {
			t.Fatalf("no process besides the main one in %s's cgroup: %v", u, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.must(t, "systemctl", "stop", u)
	expect(t, "stopped", s.show(t, u, stateProps...), map[string]string{"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"})
	after := procs()
	if len(after) == 0 || slices.Contains(after, main) {
		t.Fatalf("the unit's cgroup.procs after the stop: %v (before %v), want the left-over children, not the main PID %s", after, before, main)
	}
	child := after[0]
	if !slices.Contains(before, child) {
		t.Fatalf("left-over %s was not in the unit's cgroup before the stop (%v)", child, before)
	}
	comm := strings.TrimSpace(s.must(t, "cat", "/proc/"+child+"/comm"))
	if got := strings.Fields(s.must(t, "ps", "-o", "pid=,ppid=", "-p", child)); len(got) != 2 || got[1] != "1" {
		t.Fatalf("left-over %s: ps pid,ppid %q, want PPID 1", child, got)
	}
	if cg := s.cgroupV2(t, child); cg != "/system.slice/"+u {
		t.Errorf("left-over %s in cgroup %q, want the unit's /system.slice/%s", child, cg, u)
	}
	s.waitJournal(t, u, regexp.QuoteMeta(u)+`: Unit process `+child+` \(`+regexp.QuoteMeta(comm)+`\) remains running after unit stopped\.`)
	s.must(t, "systemctl", "start", u)
	s.waitJournal(t, u, regexp.QuoteMeta(u)+`: Found left-over process `+child+` \(`+regexp.QuoteMeta(comm)+`\) in control group while starting unit\. Ignoring\.`,
		`This usually indicates unclean termination of a previous run, or service implementation deficiencies\.`)
	s.must(t, "systemctl", "stop", u)
	for _, pid := range procs() {
		s.run(t, "kill", "-KILL", pid)
	}
}

// journalQueries checks the journalctl forms ops uses: -n N, --since "YYYY-MM-DD HH:MM:SS UTC",
// -o cat, --no-pager.
func (s *suite) journalQueries(t *testing.T) {
	const u = "suite-journal.service"
	s.write(t, u, "[Service]\nExecStart=/bin/false\n")
	s.must(t, "systemctl", "daemon-reload")
	s.must(t, "systemctl", "start", u)
	all := s.waitJournal(t, u, regexp.QuoteMeta(u)+`: Failed with result 'exit-code'\.`)
	last := s.must(t, "journalctl", "-u", u, "-n", "1", "-o", "cat", "--no-pager")
	if want := all[len(all)-1] + "\n"; last != want {
		t.Errorf("journalctl -n 1: %q, want the last line %q", last, want)
	}
	past := time.Now().UTC().Add(-time.Hour).Format("2006-01-02 15:04:05") + " UTC"
	if got := s.must(t, "journalctl", "-u", u, "--since", past, "-o", "cat", "--no-pager"); got != strings.Join(all, "\n")+"\n" {
		t.Errorf("journalctl --since an hour ago: %q, want every line", got)
	}
	future := time.Now().UTC().Add(time.Hour).Format("2006-01-02 15:04:05") + " UTC"
	r := s.run(t, "journalctl", "-u", u, "--since", future, "-o", "cat", "--no-pager")
	if r.code != 0 || (r.out != "" && r.out != "-- No entries --\n") {
		t.Errorf("journalctl --since the future: exit %d, %q, want 0 and no entry", r.code, r.out)
	}
	r = s.run(t, "journalctl", "-u", "suite-never.service", "-o", "cat", "--no-pager")
	if r.code != 0 || (r.out != "" && r.out != "-- No entries --\n") {
		t.Errorf("journalctl of a unit without entries: exit %d, %q, want 0 and no entry", r.code, r.out)
	}
	s.must(t, "systemctl", "reset-failed", u)
}

// enableDisable: is-enabled prints a unit file's state and exits 0 only for the enabled-like
// ones (systemctl(1): enabled, enabled-runtime, static, ... 0; disabled, masked, ... non-zero);
// enable and disable make and remove the [Install] section's links. --runtime, because a real
// test host's /etc is read-only: the links go to /run, the state is enabled-runtime.
func (s *suite) enableDisable(t *testing.T) {
	const u, static = "suite-enable.service", "suite-static.service"
	s.write(t, u, "[Unit]\nDescription=suite enable\n\n[Service]\nExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n")
	s.write(t, static, "[Service]\nExecStart=/bin/sleep infinity\n")
	s.must(t, "systemctl", "daemon-reload")
	isEnabled := func(what, unit, want string, code int) {
		t.Helper()
		r := s.run(t, "systemctl", "is-enabled", unit)
		if strings.TrimSpace(r.out) != want || r.code != code {
			t.Errorf("is-enabled %s: %q exit %d (%s), want %q exit %d", what, r.out, r.code, r.err, want, code)
		}
	}
	isEnabled("before enable", u, "disabled", 1)
	isEnabled("of a unit without [Install]", static, "static", 0)
	if r := s.run(t, "systemctl", "enable", "--runtime", u); r.code != 0 || !strings.Contains(r.err, "Created symlink") {
		t.Errorf("enable --runtime: exit %d %q", r.code, r.err)
	}
	isEnabled("after enable --runtime", u, "enabled-runtime", 0)
	expect(t, "enabled", s.show(t, u, "UnitFileState"), map[string]string{"UnitFileState": "enabled-runtime"})
	if r := s.run(t, "systemctl", "disable", "--runtime", u); r.code != 0 || !strings.Contains(r.err, "Removed") {
		t.Errorf("disable --runtime: exit %d %q", r.code, r.err)
	}
	isEnabled("after disable --runtime", u, "disabled", 1)
	expect(t, "disabled", s.show(t, u, "UnitFileState"), map[string]string{"UnitFileState": "disabled"})
	r := s.run(t, "systemctl", "is-enabled", "suite-nope.service")
	if r.code == 0 || !strings.Contains(r.err+r.out, "suite-nope.service") {
		t.Errorf("is-enabled of an unknown unit: exit %d %q %q", r.code, r.out, r.err)
	}
}
