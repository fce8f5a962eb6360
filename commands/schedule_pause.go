package commands

var schedulePauseSpec = &Spec{
	Path:     "schedule pause",
	Summary:  "pause a schedule",
	Examples: []string{"schedule pause 3"},
	Policy:   Policy{Role: Admin, Mutating: true, Slash: true},
	new:      func() Command { return new(SchedulePause) },
}

// SchedulePause is `schedule pause ID`: pause a schedule.
type SchedulePause struct {
	ID     int64 `json:"id"`
	DryRun bool  `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*SchedulePause) Spec() *Spec { return schedulePauseSpec }

func (c *SchedulePause) args() []arg { return []arg{id(&scheduleID, &c.ID), dryRun(&c.DryRun)} }
