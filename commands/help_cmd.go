package commands

var helpSpec = &Spec{
	Path:     "help",
	Summary:  "list the commands, or explain one",
	Examples: []string{"help", "help mtp steps"},
	Policy:   Policy{Role: Viewer},
	new:      func() Command { return new(HelpCmd) },
}

// HelpCmd is `help [COMMAND]`: the commands, or one explained.
type HelpCmd struct {
	// Topic is "" for the overview, else a group or path ("mtp", "mtp steps").
	Topic string `json:"topic,omitempty"`
}

// Spec returns the command's definition.
func (*HelpCmd) Spec() *Spec { return helpSpec }

func (c *HelpCmd) args() []arg { return []arg{topicArg{v: &c.Topic}} }
