package commands

import (
	"fmt"
	"strings"
)

var scheduleAddSpec = &Spec{
	Path:    "schedule add",
	Summary: "run a job command on a cron schedule",
	Details: "CRON is a standard 5-field spec (minute hour day-of-month month day-of-week), a descriptor " +
		"(@hourly, @daily, @weekly, @monthly, @every 6h; @every at least 1m), optionally prefixed by " +
		"CRON_TZ=Zone/Name. COMMAND is mtp steps, mtp tune, gpu recover, svc start/stop/restart, bench or sweep. " +
		"A command that asks for confirmation (gpu recover, svc stop) asks once, here: the schedule then runs it without asking. " +
		"Put --dry-run before CRON to preview the schedule.",
	Examples: []string{`schedule add "0 3 * * *" sweep qwen steps 1..5`, `schedule add "CRON_TZ=Europe/Berlin 30 6 * * 1-5" bench`, `schedule add @daily gpu recover --no-start`, `schedule add --to slack:C0OPS,matrix:!ops:example.org "0 3 * * *" bench`},
	Policy:   Policy{Role: Admin, Mutating: true, Slash: true},
	new:      func() Command { return new(ScheduleAdd) },
}

// ScheduleAdd is `schedule add "CRON" COMMAND...`: run a job command on a cron schedule.
type ScheduleAdd struct {
	// Cron is the canonical cron spec (whitespace collapsed).
	Cron string `json:"cron"`
	// Sub is the scheduled job command.
	Sub Command `json:"-"`
	// To are the --to TARGETS, canonical ("slack:C0OPS,matrix:!r:hs"); empty: the room the command came from.
	To     string `json:"to,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*ScheduleAdd) Spec() *Spec { return scheduleAddSpec }

func (c *ScheduleAdd) args() []arg {
	return []arg{dryRun(&c.DryRun), toArg{v: &c.To}, cronArg{v: &c.Cron}, subArg{v: &c.Sub}}
}

// raiseRole: a schedule needs at least what its command needs.
func (c *ScheduleAdd) raiseRole(r Role) Role {
	if c.Sub != nil {
		r = max(r, RoleOf(c.Sub))
	}
	return r
}

// confirmsFor: the creator confirms once, here, what the schedule runs.
func (c *ScheduleAdd) confirmsFor() Command { return c.Sub }

// Preview says what the command will do, for its confirmation.
func (c *ScheduleAdd) Preview() string {
	return fmt.Sprintf("`%s` will run `%s` at `%s` without asking again, each time: %s",
		Text(c), Text(c.Sub), c.Cron, strings.TrimSuffix(PreviewOf(c.Sub), "."))
}
