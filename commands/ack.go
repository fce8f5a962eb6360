package commands

var ackSpec = &Spec{
	Path:    "ack",
	Summary: "acknowledge a watchdog alert: it stops reminding, and says who took it",
	Details: "INCIDENT is the number the alert shows (`incident #7`). The alert keeps being edited as the service " +
		"recovers or not; only its reminders stop.",
	Examples: []string{"ack 7", "ack #7"},
	Policy:   Policy{Role: Operator},
	new:      func() Command { return new(Ack) },
}

// Ack is `ack INCIDENT`: acknowledge a watchdog alert.
type Ack struct {
	Incident int64 `json:"incident"`
}

// Spec returns the command's definition.
func (*Ack) Spec() *Spec { return ackSpec }

func (c *Ack) args() []arg { return []arg{id(&incidentID, &c.Incident)} }
