package commands

var scheduleListSpec = &Spec{
	Path:     "schedule list",
	Summary:  "list the schedules with their next runs (in each schedule's time zone)",
	Examples: []string{"schedule list"},
	Policy:   Policy{Role: Viewer, Slash: true},
	new:      func() Command { return new(ScheduleList) },
}

// ScheduleList is `schedule list`: the schedules with their next runs.
type ScheduleList struct {
}

// Spec returns the command's definition.
func (*ScheduleList) Spec() *Spec { return scheduleListSpec }

func (*ScheduleList) args() []arg { return []arg{} }
