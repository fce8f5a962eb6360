package commands

var cancelSpec = &Spec{
	Path:     "cancel",
	Summary:  "cancel a queued or running job",
	Details:  "Only the user who started the job, or an admin, may cancel it.",
	Examples: []string{"cancel 42", "cancel #42"},
	Policy:   Policy{Role: Operator},
	new:      func() Command { return new(Cancel) },
}

// Cancel is `cancel JOB`: cancel a queued or running job.
type Cancel struct {
	ID int64 `json:"id"`
}

// Spec returns the command's definition.
func (*Cancel) Spec() *Spec { return cancelSpec }

func (c *Cancel) args() []arg { return []arg{id(&jobID, &c.ID)} }
