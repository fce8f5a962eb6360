package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "30s", "5m" in YAML.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: duration must be a string like 30s or 5m", n.Line)
	}
	v, err := ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: invalid duration %q (use e.g. 30s, 5m, 1h, 90d)", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// ParseDuration parses a Go duration ("30s", "1h30m") or a whole number of
// days ("90d").
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
		n, err := strconv.Atoi(days)
		if err != nil || n > 100000 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// MarshalYAML writes the duration as a string, as String does.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String writes the duration the way an operator does, in a form
// ParseDuration reads back: whole days as "90d", else Go's form without its
// zero units ("2m", "1h30m", "36h", "1.5s"); zero is "0s".
func (d Duration) String() string {
	v := time.Duration(d)
	const day = 24 * time.Hour
	if v > 0 && v%day == 0 {
		return strconv.FormatInt(int64(v/day), 10) + "d"
	}
	s := v.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
