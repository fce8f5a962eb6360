package lab

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// unitEntry is one Key=Value assignment of a unit file, in file order.
type unitEntry struct {
	Section, Key, Value string
	File                string
	Line                int
}

// parseUnitText parses systemd unit file syntax: [Section] headers, Key=Value lines, comments
// starting with '#' or ';', and backslash-newline continuations (the backslash and newline
// become one space, comment lines inside a continuation are skipped, as systemd does).
func parseUnitText(file, text string) ([]unitEntry, error) {
	var out []unitEntry
	section := ""
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			line = strings.TrimSuffix(line, "\\") + " "
			i++
			next := strings.TrimSpace(lines[i])
			for next != "" && (next[0] == '#' || next[0] == ';') && i+1 < len(lines) {
				i++
				next = strings.TrimSpace(lines[i])
			}
			line += next
		}
		line = strings.TrimSuffix(line, "\\")
		if line[0] == '[' {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("%s:%d: invalid section header %q", file, lineNo, line)
			}
			section = line[1 : len(line)-1]
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: missing '=' in %q", file, lineNo, line)
		}
		if section == "" {
			return nil, fmt.Errorf("%s:%d: assignment outside of section", file, lineNo)
		}
		out = append(out, unitEntry{Section: section, Key: strings.TrimSpace(k), Value: strings.TrimSpace(v), File: file, Line: lineNo})
	}
	return out, nil
}

// unitConfig is the effective configuration of a service after its fragment and drop-ins.
type unitConfig struct {
	Description        string
	ExecStart          []string // raw values; an empty assignment resets the list
	Environment        []string // KEY=VALUE in order
	Restart            string
	RestartSec         time.Duration //lint:ignore ST1011 named as in the unit file
	KillMode           string
	TimeoutStopSec     time.Duration //lint:ignore ST1011 named as in the unit file
	StartLimitBurst    int
	StartLimitInterval time.Duration
	Type               string
	WorkingDirectory   string
}

func defaultUnitConfig() unitConfig {
	return unitConfig{
		Restart: "no", RestartSec: 100 * time.Millisecond, KillMode: "control-group",
		TimeoutStopSec: 90 * time.Second, StartLimitBurst: 5, StartLimitInterval: 10 * time.Second, Type: "simple",
	}
}

// buildUnitConfig folds entries (fragment first, then drop-ins in order) into a unitConfig.
func buildUnitConfig(entries []unitEntry) (unitConfig, error) {
	c := defaultUnitConfig()
	for _, e := range entries {
		var err error
		switch e.Section + "." + e.Key {
		case "Unit.Description":
			c.Description = e.Value
		case "Service.ExecStart":
			if e.Value == "" {
				c.ExecStart = nil
			} else {
				c.ExecStart = append(c.ExecStart, e.Value)
			}
		case "Service.Environment":
			if e.Value == "" {
				c.Environment = nil
				continue
			}
			var words []string
			words, err = splitSystemdWords(e.Value)
			c.Environment = append(c.Environment, words...)
		case "Service.Restart":
			switch e.Value {
			case "no", "always", "on-failure", "on-success", "on-abnormal", "on-abort", "on-watchdog":
				c.Restart = e.Value
			default:
				err = fmt.Errorf("invalid Restart=%q", e.Value)
			}
		case "Service.RestartSec":
			c.RestartSec, err = parseSystemdDuration(e.Value)
		case "Service.KillMode":
			switch e.Value {
			case "control-group", "mixed", "process", "none":
				c.KillMode = e.Value
			default:
				err = fmt.Errorf("invalid KillMode=%q", e.Value)
			}
		case "Service.TimeoutStopSec", "Service.TimeoutSec":
			c.TimeoutStopSec, err = parseSystemdDuration(e.Value)
		case "Unit.StartLimitBurst", "Service.StartLimitBurst":
			c.StartLimitBurst, err = strconv.Atoi(e.Value)
		case "Unit.StartLimitIntervalSec", "Service.StartLimitInterval":
			c.StartLimitInterval, err = parseSystemdDuration(e.Value)
		case "Service.Type":
			c.Type = e.Value
		case "Service.WorkingDirectory":
			c.WorkingDirectory = e.Value
		}
		if err != nil {
			return c, fmt.Errorf("%s:%d: %s=: %w", e.File, e.Line, e.Key, err)
		}
	}
	return c, nil
}

// parseSystemdDuration parses systemd time spans: a bare number is seconds; units us, ms, s,
// min, h, d may be combined ("1min 30s"); "infinity" is a very long span.
func parseSystemdDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "infinity" {
		return 1 << 62, nil
	}
	if s == "" {
		return 0, fmt.Errorf("empty time span")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 {
			return 0, fmt.Errorf("negative time span %q", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	units := map[string]time.Duration{"us": time.Microsecond, "usec": time.Microsecond, "ms": time.Millisecond, "msec": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second, "m": time.Minute, "min": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour, "d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour}
	var total time.Duration
	rest := strings.ReplaceAll(s, " ", "")
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		j := i
		for j < len(rest) && rest[j] >= 'a' && rest[j] <= 'z' {
			j++
		}
		if i == 0 || j == i {
			return 0, fmt.Errorf("invalid time span %q", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		u, ok := units[rest[i:j]]
		if err != nil || !ok {
			return 0, fmt.Errorf("invalid time span %q", s)
		}
		total += time.Duration(n * float64(u))
		rest = rest[j:]
	}
	return total, nil
}

// formatSystemdDuration formats a span the way systemctl show prints RestartUSec ("5s", "100ms", "1min 30s").
func formatSystemdDuration(d time.Duration) string {
	if d >= 1<<62 {
		return "infinity"
	}
	if d == 0 {
		return "0"
	}
	var parts []string
	for _, u := range []struct {
		d time.Duration
		n string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "min"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d >= u.d {
			parts = append(parts, fmt.Sprintf("%d%s", d/u.d, u.n))
			d %= u.d
		}
	}
	return strings.Join(parts, " ")
}

// splitSystemdWords splits a value such as Environment= into words, honouring double and single
// quotes and C-style backslash escapes, as systemd's extract_first_word does.
func splitSystemdWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '"' || c == '\'':
			in = true
			q := c
			i++
			for ; ; i++ {
				if i >= len(s) {
					return nil, &SyntaxError{Input: s, Problem: "unbalanced quoting"}
				}
				if s[i] == q {
					break
				}
				if s[i] == '\\' {
					n, adv, err := cUnescape(s, i)
					if err != nil {
						return nil, err
					}
					cur.WriteString(n)
					i += adv - 1
					continue
				}
				cur.WriteByte(s[i])
			}
		case c == '\\':
			n, adv, err := cUnescape(s, i)
			if err != nil {
				return nil, err
			}
			cur.WriteString(n)
			i += adv - 1
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// cUnescape decodes the C escape at s[i] (which is '\\'); it returns the text and how many bytes it used.
func cUnescape(s string, i int) (string, int, error) {
	if i+1 >= len(s) {
		return "", 0, &SyntaxError{Input: s, Problem: "trailing backslash"}
	}
	switch c := s[i+1]; c {
	case 'n':
		return "\n", 2, nil
	case 't':
		return "\t", 2, nil
	case 'r':
		return "\r", 2, nil
	case 'a':
		return "\a", 2, nil
	case 'b':
		return "\b", 2, nil
	case 'f':
		return "\f", 2, nil
	case 'v':
		return "\v", 2, nil
	case 's':
		return " ", 2, nil
	case '\\', '"', '\'', ' ', '$', ';':
		return string(c), 2, nil
	case 'x':
		if i+3 < len(s)+0 && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				return string([]byte{byte(v)}), 4, nil
			}
		}
		return "", 0, &SyntaxError{Input: s, Problem: "invalid \\x escape"}
	default:
		return "", 0, &SyntaxError{Input: s, Problem: fmt.Sprintf("invalid escape \\%c", c)}
	}
}

// parseExecStart turns one ExecStart= value into argv with systemd's rules: optional prefix
// characters (@ - : + !), words split with quotes and C escapes, "$$" -> "$", "%%" -> "%",
// unit specifiers (%n %N %p %i %I %h %u %H %t), and $VAR / ${VAR} from env ("${VAR}" inside one
// word, "$VAR" as a word of its own splits on blanks). An empty result is an error.
func parseExecStart(value, unitName, hostname string, env []string) (argv []string, ignoreFailure bool, err error) {
	v := strings.TrimSpace(value)
	for v != "" && strings.ContainsRune("@-:+!", rune(v[0])) {
		if v[0] == '-' {
			ignoreFailure = true
		}
		v = v[1:]
	}
	words, err := splitSystemdWords(v)
	if err != nil {
		return nil, false, fmt.Errorf("parse ExecStart: %w", err)
	}
	envMap := map[string]string{}
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok {
			envMap[k] = val
		}
	}
	name := strings.TrimSuffix(unitName, ".service")
	spec := map[byte]string{'n': unitName, 'N': name, 'p': name, 'i': "", 'I': "", 'h': "/root", 'u': "root", 'U': "0", 'H': hostname, 't': "/run", 'S': "/var/lib", 'C': "/var/cache", 'L': "/var/log", '%': "%"}
	for _, w := range words {
		if w == ";" {
			break // a lone semicolon separates commands; only the first one matters here
		}
		// A word that is exactly $VAR expands to several words.
		if len(w) > 1 && w[0] == '$' && w[1] != '$' && w[1] != '{' && isEnvName(w[1:]) {
			argv = append(argv, strings.Fields(envMap[w[1:]])...)
			continue
		}
		var b strings.Builder
		for i := 0; i < len(w); i++ {
			c := w[i]
			switch {
			case c == '%' && i+1 < len(w):
				r, ok := spec[w[i+1]]
				if !ok {
					return nil, false, fmt.Errorf("parse ExecStart: unknown specifier %%%c in %q", w[i+1], w)
				}
				b.WriteString(r)
				i++
			case c == '$' && i+1 < len(w) && w[i+1] == '$':
				b.WriteByte('$')
				i++
			case c == '$' && i+1 < len(w) && w[i+1] == '{':
				end := strings.IndexByte(w[i:], '}')
				if end < 0 {
					b.WriteByte(c)
					continue
				}
				b.WriteString(envMap[w[i+2:i+end]])
				i += end
			default:
				b.WriteByte(c)
			}
		}
		argv = append(argv, b.String())
	}
	if len(argv) == 0 {
		return nil, false, fmt.Errorf("parse ExecStart: empty command line")
	}
	return argv, ignoreFailure, nil
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// dropInNames sorts drop-in file names as systemd applies them (lexical order).
func dropInNames(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".conf") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
