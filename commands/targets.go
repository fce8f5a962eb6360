package commands

import (
	"fmt"
	"strings"
	"time"
)

// Target is one room on one chat platform, where a schedule's runs or the
// watchdog's alerts are posted.
type Target struct{ Platform, Room string }

// String returns "platform:room".
func (t Target) String() string { return t.Platform + ":" + t.Room }

// TargetPlatforms are the platforms a target may name.
var TargetPlatforms = []string{"slack", "matrix", "console"}

// ParseTargets parses TARGETS, "slack:C0OPS,matrix:!room:example.org": one
// or more platform:room pairs, comma separated, in order. A room has no
// spaces, quotes or shell characters; a pair given twice is an error.
func ParseTargets(s string) ([]Target, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no targets: write platform:room, comma separated, e.g. slack:C0OPS,matrix:!ops:example.org")
	}
	var out []Target
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		platform, room, ok := strings.Cut(part, ":")
		switch {
		case part == "":
			return nil, fmt.Errorf("empty target in %s: write platform:room, comma separated", quote(s))
		case !ok || platform == "" || room == "":
			return nil, fmt.Errorf("target %s: write platform:room, e.g. slack:C0OPS or matrix:!ops:example.org", quote(part))
		case strings.ContainsFunc(part, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("\"'`$;|&<>(){}\\*?", r) }):
			return nil, fmt.Errorf("target %s: a platform:room has no spaces, quotes or shell characters", quote(part))
		case !knownPlatform(platform):
			return nil, fmt.Errorf("target %s: unknown platform %s (%s)", quote(part), quote(platform), strings.Join(TargetPlatforms, ", "))
		case seen[part]:
			return nil, fmt.Errorf("target %s is listed twice", quote(part))
		}
		seen[part] = true
		out = append(out, Target{Platform: platform, Room: room})
	}
	return out, nil
}

func knownPlatform(p string) bool {
	for _, k := range TargetPlatforms {
		if p == k {
			return true
		}
	}
	return false
}

// FormatTargets writes ts as ParseTargets reads them.
func FormatTargets(ts []Target) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

// Limits of `watchdog silence`.
const (
	MinSilence = time.Minute
	MaxSilence = 7 * 24 * time.Hour
)

// ParseDuration reads a silence's DURATION: Go's 90m, 2h, 1h30m, or days
// as 1d, between MinSilence and MaxSilence, whole minutes.
func ParseDuration(s string) (time.Duration, string) {
	var d time.Duration
	var err error
	if n, ok := strings.CutSuffix(strings.ToLower(s), "d"); ok && isDigits(n) && len(n) <= 3 {
		d = time.Duration(atoi(n)) * 24 * time.Hour
	} else if d, err = time.ParseDuration(strings.ToLower(s)); err != nil {
		return 0, fmt.Sprintf("DURATION must be like 30m, 2h or 1d, got %s", quote(s))
	}
	switch {
	case d < MinSilence:
		return 0, fmt.Sprintf("DURATION must be at least %s, got %s", formatDuration(MinSilence), quote(s))
	case d > MaxSilence:
		return 0, fmt.Sprintf("DURATION must be at most %s, got %s", formatDuration(MaxSilence), quote(s))
	case d%time.Minute != 0:
		return 0, fmt.Sprintf("DURATION is in whole minutes, got %s", quote(s))
	}
	return d, ""
}

// formatDuration writes d (whole minutes) in the largest whole unit: 2d,
// 3h, 90m.
func formatDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dm", d/time.Minute)
}

// looksDuration reports whether w could only be a DURATION (digits then a
// unit), not a service name.
func looksDuration(w string) bool {
	_, prob := ParseDuration(w)
	return prob == "" || (len(w) > 1 && w[0] >= '0' && w[0] <= '9' && strings.ContainsAny(w[len(w)-1:], "smhdSMHD"))
}
