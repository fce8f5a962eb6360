package bot

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/opsbot/opsbot/commands"
)

// ParseSchedule parses a stored cron spec the way the scheduler runs it: a
// spec without CRON_TZ= is in loc. It never panics (robfig/cron does on some
// malformed CRON_TZ= prefixes).
func ParseSchedule(spec string, loc *time.Location) (sched cron.Schedule, zone *time.Location, err error) {
	defer func() {
		if r := recover(); r != nil {
			sched, zone, err = nil, nil, fmt.Errorf("invalid cron spec %q", spec)
		}
	}()
	zone = loc
	if z, ok := strings.CutPrefix(spec, "CRON_TZ="); ok {
		name, _, _ := strings.Cut(z, " ")
		if zone, err = time.LoadLocation(name); err != nil {
			return nil, nil, fmt.Errorf("cron spec %q: time zone: %w", spec, err)
		}
	} else {
		spec = "CRON_TZ=" + loc.String() + " " + spec
	}
	sched, err = cron.ParseStandard(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("cron spec %q: %w", spec, err)
	}
	return sched, zone, nil
}

// ParseTargets reads "slack:C1,matrix:!r:hs"; a bad list (validated before
// it was stored) reads as none.
func ParseTargets(s string) []Target {
	ts, err := commands.ParseTargets(s)
	if err != nil {
		return nil
	}
	out := make([]Target, 0, len(ts))
	for _, t := range ts {
		out = append(out, Target{Platform: t.Platform, Room: t.Room})
	}
	return out
}
