package commands

var historySpec = &Spec{
	Path:     "history",
	Summary:  "show a service's recent benchmark results",
	Examples: []string{"history", "history qwen n=20"},
	Policy:   Policy{Role: Viewer, OnGroup: GroupEach},
	new:      func() Command { return new(History) },
}

// History is `history [SERVICE] [n=N]`: a service's recent benchmark results.
type History struct {
	On
	N int `json:"n"` // default 10
}

// Spec returns the command's definition.
func (*History) Spec() *Spec { return historySpec }

func (c *History) args() []arg { return []arg{service(&c.On), keyed(&keyN, &c.N)} }
