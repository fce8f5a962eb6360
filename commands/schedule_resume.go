package commands

var scheduleResumeSpec = &Spec{
	Path:     "schedule resume",
	Summary:  "resume a paused schedule",
	Examples: []string{"schedule resume #3"},
	Policy:   Policy{Role: Admin, Mutating: true, Slash: true},
	new:      func() Command { return new(ScheduleResume) },
}

// ScheduleResume is `schedule resume ID`: resume a paused schedule.
type ScheduleResume struct {
	ID     int64 `json:"id"`
	DryRun bool  `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*ScheduleResume) Spec() *Spec { return scheduleResumeSpec }

func (c *ScheduleResume) args() []arg { return []arg{id(&scheduleID, &c.ID), dryRun(&c.DryRun)} }
