package commands

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest `@every` interval a schedule may use: standard cron
// specs fire at most once a minute, and so do descriptors.
const MinEvery = time.Minute

// cronProbe is a fixed instant used to check that a spec ever fires (Feb 30 never
// does); a constant keeps Parse free of the clock.
var cronProbe = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ValidateCron checks a schedule spec the way the scheduler will parse it
// (robfig/cron/v3 ParseStandard: 5 fields, @descriptors, @every D, an optional
// CRON_TZ=Zone prefix) and returns it canonical: whitespace collapsed to single
// spaces, TZ= spelled CRON_TZ=. It rejects characters no spec contains, @every
// shorter than MinEvery and specs that never fire. It never panics: the cron
// parser does on some malformed CRON_TZ prefixes, and that is recovered.
func ValidateCron(spec string) (canon string, err error) {
	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return "", fmt.Errorf("the cron spec is empty")
	}
	for i := 0; i < len(spec); i++ {
		c := spec[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == ' ', c == '*', c == '/', c == ',', c == '-', c == '@', c == '=', c == '_', c == '+', c == '?', c == '.':
		default:
			if c < 0x20 || c >= 0x7f {
				return "", fmt.Errorf("unexpected character in cron spec %s", quote(spec))
			}
			return "", fmt.Errorf("unexpected %q in cron spec %s", string(c), quote(spec))
		}
	}
	for i, f := range fields {
		if strings.HasPrefix(f, "@") {
			fields[i] = strings.ToLower(f)
		}
	}
	if k, zone, ok := strings.Cut(fields[0], "="); ok && (strings.EqualFold(k, "TZ") || strings.EqualFold(k, "CRON_TZ")) {
		fields[0] = "CRON_TZ=" + zone
	}
	if strings.HasPrefix(fields[0], "CRON_TZ=") {
		zone := fields[0][len("CRON_TZ="):]
		if zone == "" {
			return "", fmt.Errorf("CRON_TZ= needs a time zone, e.g. CRON_TZ=Europe/Berlin")
		}
		if len(fields) == 1 {
			return "", fmt.Errorf("CRON_TZ=%s needs a schedule after it, e.g. \"CRON_TZ=%s 0 3 * * *\"", zone, zone)
		}
	}
	for _, f := range fields {
		if strings.HasPrefix(f, "CRON_TZ=") && f != fields[0] || strings.HasPrefix(f, "TZ=") {
			return "", fmt.Errorf("CRON_TZ= may only start the cron spec")
		}
	}
	for i, f := range fields {
		if f != "@every" {
			continue
		}
		if i+1 >= len(fields) {
			return "", fmt.Errorf("@every needs an interval, e.g. @every 6h")
		}
		d, err := time.ParseDuration(fields[i+1])
		if err != nil {
			return "", fmt.Errorf("@every needs an interval like 30m or 6h, got %s", quote(fields[i+1]))
		}
		if d < MinEvery {
			return "", fmt.Errorf("@every must be at least 1m, got %s", fields[i+1])
		}
	}
	canon = strings.Join(fields, " ")
	sched, err := parseCronSafe(canon)
	if err != nil {
		return "", err
	}
	if d, ok := sched.(cron.ConstantDelaySchedule); ok && d.Delay < MinEvery {
		return "", fmt.Errorf("@every must be at least 1m, got %s", d.Delay)
	}
	if sched.Next(cronProbe).IsZero() {
		return "", fmt.Errorf("cron spec %s never fires", quote(canon))
	}
	return canon, nil
}

func parseCronSafe(spec string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("invalid cron spec %s", quote(spec))
		}
	}()
	s, err = cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("invalid cron spec %s: %w", quote(spec), err)
	}
	return s, nil
}
