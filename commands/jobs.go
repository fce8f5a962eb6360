package commands

var jobsSpec = &Spec{
	Path:     "jobs",
	Summary:  "list queued and running jobs (all: recent ones too)",
	Examples: []string{"jobs", "jobs all"},
	Policy:   Policy{Role: Viewer, Slash: true},
	new:      func() Command { return new(Jobs) },
}

// Jobs is `jobs [all]`: queued and running jobs (all: recent ones too).
type Jobs struct {
	All bool `json:"all,omitempty"`
}

// Spec returns the command's definition.
func (*Jobs) Spec() *Spec { return jobsSpec }

func (c *Jobs) args() []arg { return []arg{allArg{v: &c.All}} }
