package commands

var scheduleRmSpec = &Spec{
	Path:     "schedule rm",
	Summary:  "delete a schedule",
	Examples: []string{"schedule rm 3"},
	Policy:   Policy{Role: Admin, Mutating: true, Slash: true},
	new:      func() Command { return new(ScheduleRm) },
}

// ScheduleRm is `schedule rm ID`: delete a schedule.
type ScheduleRm struct {
	ID     int64 `json:"id"`
	DryRun bool  `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*ScheduleRm) Spec() *Spec { return scheduleRmSpec }

func (c *ScheduleRm) args() []arg { return []arg{id(&scheduleID, &c.ID), dryRun(&c.DryRun)} }
