// Package systemd reads and drives systemd services on a remote host through a
// Runner: it parses `systemctl show` into a typed State, runs start, stop,
// restart, reset-failed, daemon-reload, cat and journal queries, waits for a
// state with tight polling bounded by the caller's context, recognises restart
// loops, and diagnoses why an engine failed to start from its journal lines.
//
// Every remote command is one of the forms listed in the ops layer's command
// contract; nothing here builds a shell string.
package systemd

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ShowProperties are the properties Show asks for, in request order.
var ShowProperties = []string{
	"Id", "LoadState", "ActiveState", "SubState", "Result", "NRestarts",
	"MainPID", "ExecMainPID", "ExecMainStatus", "ExecMainCode", "NeedDaemonReload",
	"FragmentPath", "DropInPaths", "ControlGroup", "KillMode", "Restart", "RestartUSec",
	"StartLimitBurst", "ExecMainStartTimestamp", "ActiveEnterTimestamp",
}

// Exit codes of the main process as systemd reports them in ExecMainCode
// (the si_code of the SIGCHLD: CLD_EXITED, CLD_KILLED, CLD_DUMPED).
const (
	CodeExited = 1
	CodeKilled = 2
	CodeDumped = 3
)

// State is a unit's state as `systemctl show` reports it. Numeric fields are 0
// and strings empty when the property was not in the output; Props holds every
// property that was, known or not, with its raw value.
type State struct {
	ID          string
	LoadState   string // loaded, not-found, masked, error, ...
	ActiveState string // active, activating, deactivating, inactive, failed, reloading
	SubState    string // running, start, auto-restart, auto-restart-queued, dead, failed, ...
	Result      string // success, exit-code, signal, core-dump, timeout, start-limit-hit, ...

	NRestarts      int
	MainPID        int
	ExecMainPID    int
	ExecMainStatus int // exit status, or the signal number when ExecMainCode is CodeKilled/CodeDumped
	ExecMainCode   int // CodeExited, CodeKilled, CodeDumped; 0 when it never ran

	NeedDaemonReload bool
	FragmentPath     string
	DropInPaths      []string
	ControlGroup     string
	KillMode         string
	Restart          string
	RestartSec       time.Duration //lint:ignore ST1011 named as in the unit file (RestartUSec; -1 for "infinity")
	StartLimitBurst  int

	ExecMainStartTimestamp time.Time // zero when empty or n/a
	ActiveEnterTimestamp   time.Time

	Props map[string]string
}

// Get returns the raw value of a property and whether it was present.
func (s State) Get(key string) (string, bool) {
	v, ok := s.Props[key]
	return v, ok
}

// Timestamp parses the named timestamp property (for example
// InactiveEnterTimestamp). It reports false when the property is absent, empty
// or "n/a".
func (s State) Timestamp(key string) (time.Time, bool) {
	v, ok := s.Props[key]
	if !ok {
		return time.Time{}, false
	}
	t, err := ParseTimestamp(v)
	if err != nil || t.IsZero() {
		return time.Time{}, false
	}
	return t, true
}

// Found reports whether systemd knows the unit (LoadState is not "not-found").
func (s State) Found() bool { return s.LoadState != "" && s.LoadState != "not-found" }

// Active reports ActiveState == "active".
func (s State) Active() bool { return s.ActiveState == "active" }

// Stopped reports a unit that is not running and not about to run again:
// inactive, or failed. An auto-restart pending is not stopped.
func (s State) Stopped() bool {
	return (s.ActiveState == "inactive" || s.ActiveState == "failed") && !s.AutoRestarting()
}

// AutoRestarting reports the state between a crash and systemd's automatic
// restart: SubState auto-restart (or auto-restart-queued on newer systemd).
func (s State) AutoRestarting() bool {
	return s.SubState == "auto-restart" || s.SubState == "auto-restart-queued"
}

// StartLimitHit reports a unit that failed because it was started too often.
func (s State) StartLimitHit() bool {
	return s.ActiveState == "failed" && s.Result == "start-limit-hit"
}

// MainExit describes how the main process ended, e.g. "exited with status 1" or
// "killed by signal 9"; "" when it never ran.
func (s State) MainExit() string {
	switch s.ExecMainCode {
	case CodeExited:
		return fmt.Sprintf("exited with status %d", s.ExecMainStatus)
	case CodeKilled:
		return fmt.Sprintf("killed by signal %d", s.ExecMainStatus)
	case CodeDumped:
		return fmt.Sprintf("dumped core on signal %d", s.ExecMainStatus)
	}
	return ""
}

// String is a one-line summary, e.g. "activating (auto-restart), NRestarts 3, result exit-code".
func (s State) String() string {
	var b strings.Builder
	b.WriteString(s.ActiveState)
	if s.ActiveState == "" {
		b.WriteString("unknown")
	}
	if s.SubState != "" {
		fmt.Fprintf(&b, " (%s)", s.SubState)
	}
	if s.MainPID > 0 {
		fmt.Fprintf(&b, ", main pid %d", s.MainPID)
	}
	if s.NRestarts > 0 {
		fmt.Fprintf(&b, ", NRestarts %d", s.NRestarts)
	}
	if s.Result != "" && s.Result != "success" {
		fmt.Fprintf(&b, ", result %s", s.Result)
	}
	if s.LoadState != "" && s.LoadState != "loaded" {
		fmt.Fprintf(&b, ", %s", s.LoadState)
	}
	return b.String()
}

// ParseError is returned by ParseShow for output that is not `systemctl show`.
type ParseError struct {
	Line int    // 1-based line number
	Text string // the offending line, truncated
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("systemctl show output line %d %q: %s", e.Line, e.Text, e.Msg)
}

// ParseShow parses `systemctl show` output: Key=Value lines in any order.
// Empty lines are skipped (they separate units when several were shown; the
// last value of a repeated key wins). A line without '=' or with an empty key
// is a *ParseError; so is a typed property whose value does not parse (for
// example NRestarts=abc). Unknown properties are kept in Props.
func ParseShow(out []byte) (State, error) {
	s := State{Props: make(map[string]string)}
	lineNo := 0
	for len(out) > 0 {
		var line []byte
		line, out, _ = bytes.Cut(out, []byte{'\n'})
		lineNo++
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte{'='})
		key := string(bytes.TrimSpace(k))
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return State{}, &ParseError{Line: lineNo, Text: truncate(string(line)), Msg: "want Key=Value"}
		}
		if !utf8.Valid(v) {
			v = bytes.ToValidUTF8(v, []byte("\uFFFD"))
		}
		s.Props[key] = string(v)
	}
	if len(s.Props) == 0 {
		return State{}, &ParseError{Line: 0, Msg: "no properties"}
	}
	if err := s.fill(); err != nil {
		return State{}, err
	}
	return s, nil
}

func (s *State) fill() error {
	str := func(key string, dst *string) {
		if v, ok := s.Props[key]; ok {
			*dst = strings.TrimSpace(v)
		}
	}
	str("Id", &s.ID)
	str("LoadState", &s.LoadState)
	str("ActiveState", &s.ActiveState)
	str("SubState", &s.SubState)
	str("Result", &s.Result)
	str("FragmentPath", &s.FragmentPath)
	str("ControlGroup", &s.ControlGroup)
	str("KillMode", &s.KillMode)
	str("Restart", &s.Restart)

	var errs []error
	num := func(key string, dst *int) {
		v, ok := s.Props[key]
		if !ok {
			return
		}
		v = strings.TrimSpace(v)
		if v == "" || v == "[not set]" {
			return
		}
		if v == "infinity" {
			*dst = -1
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("property %s=%q: not a number", key, truncate(v)))
			return
		}
		*dst = n
	}
	num("NRestarts", &s.NRestarts)
	num("MainPID", &s.MainPID)
	num("ExecMainPID", &s.ExecMainPID)
	num("ExecMainStatus", &s.ExecMainStatus)
	num("ExecMainCode", &s.ExecMainCode)
	num("StartLimitBurst", &s.StartLimitBurst)

	if v, ok := s.Props["NeedDaemonReload"]; ok {
		b, err := parseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("property NeedDaemonReload=%q: %w", truncate(v), err))
		}
		s.NeedDaemonReload = b
	}
	if v, ok := s.Props["DropInPaths"]; ok {
		s.DropInPaths = strings.Fields(v)
	}
	if v, ok := s.Props["RestartUSec"]; ok {
		d, err := ParseTimespan(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("property RestartUSec=%q: %w", truncate(v), err))
		}
		s.RestartSec = d
	}
	ts := func(key string, dst *time.Time) {
		v, ok := s.Props[key]
		if !ok {
			return
		}
		t, err := ParseTimestamp(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("property %s: %w", key, err))
			return
		}
		*dst = t
	}
	ts("ExecMainStartTimestamp", &s.ExecMainStartTimestamp)
	ts("ActiveEnterTimestamp", &s.ActiveEnterTimestamp)
	if len(errs) > 0 {
		return &ParseError{Msg: errors.Join(errs...).Error()}
	}
	return nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "yes", "true", "1", "on", "y":
		return true, nil
	case "no", "false", "0", "off", "n", "":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

// ParseTimestamp parses a systemd timestamp as `systemctl show` prints it:
// "Wed 2026-12-02 18:00:00 UTC", with optional microseconds
// ("... 18:00:00.123456 UTC"), the "@EPOCH[.FRACTION]" form of
// --timestamp=unix, or "" / "n/a" (zero time, no error).
//
// A zone abbreviation other than UTC/GMT that Go does not know for the local
// zone is read with a zero offset (time.Parse's rule); hosts are expected to
// run in UTC, as servers usually do.
func ParseTimestamp(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "n/a" || v == "0" {
		return time.Time{}, nil
	}
	if strings.HasPrefix(v, "@") {
		secs, frac, _ := strings.Cut(v[1:], ".")
		n, err := strconv.ParseInt(secs, 10, 64)
		if err != nil || n < 0 {
			return time.Time{}, fmt.Errorf("timestamp %q: bad epoch seconds", truncate(v))
		}
		var nsec int64
		if frac != "" {
			if len(frac) > 9 {
				frac = frac[:9]
			}
			f, err := strconv.ParseInt(frac, 10, 64)
			if err != nil || f < 0 {
				return time.Time{}, fmt.Errorf("timestamp %q: bad fraction", truncate(v))
			}
			for i := len(frac); i < 9; i++ {
				f *= 10
			}
			nsec = f
		}
		return time.Unix(n, nsec).UTC(), nil
	}
	for _, layout := range []string{
		"Mon 2006-01-02 15:04:05 MST",
		"Mon 2006-01-02 15:04:05.999999 MST",
		"Mon 2006-01-02 15:04:05 -0700",
		"2006-01-02 15:04:05 MST",
	} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q: not a systemd timestamp", truncate(v))
}

// timespan units as systemd prints and accepts them.
var spanUnits = map[string]time.Duration{
	"us": time.Microsecond, "usec": time.Microsecond, "µs": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

// ParseTimespan parses a systemd time span such as "5s", "100ms", "1min 30s",
// "2h 5min" or a bare number of seconds; "infinity" is -1 and "" is 0.
func ParseTimespan(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "", "0":
		return 0, nil
	case "infinity":
		return -1, nil
	}
	var total time.Duration
	rest := v
	for rest != "" {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("time span %q: want a number", truncate(v))
		}
		numStr := rest[:i]
		rest = rest[i:]
		j := 0
		for j < len(rest) && rest[j] != ' ' && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		unitStr := rest[:j]
		rest = rest[j:]
		unit := time.Second
		if unitStr != "" {
			u, ok := spanUnits[unitStr]
			if !ok {
				return 0, fmt.Errorf("time span %q: unknown unit %q", truncate(v), truncate(unitStr))
			}
			unit = u
		}
		f, err := strconv.ParseFloat(numStr, 64)
		if err != nil || f > float64(1<<62)/float64(unit) {
			return 0, fmt.Errorf("time span %q: bad number %q", truncate(v), truncate(numStr))
		}
		total += time.Duration(f * float64(unit))
	}
	return total, nil
}

// FormatProps renders properties as `systemctl show` would, sorted by key; used
// by tests and diagnostics.
func FormatProps(props map[string]string) string {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(props[k])
		b.WriteByte('\n')
	}
	return b.String()
}

func truncate(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
