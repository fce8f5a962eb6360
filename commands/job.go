package commands

var jobSpec = &Spec{
	Path:     "job",
	Summary:  "show one job in full: its steps with times, result, who asked and confirmed, the unit diff",
	Examples: []string{"job 42", "job #42"},
	Policy:   Policy{Role: Viewer},
	new:      func() Command { return new(JobInfo) },
}

// JobInfo is `job JOB`: one job in full.
type JobInfo struct {
	ID int64 `json:"id"`
}

// Spec returns the command's definition.
func (*JobInfo) Spec() *Spec { return jobSpec }

func (c *JobInfo) args() []arg { return []arg{id(&jobID, &c.ID)} }
