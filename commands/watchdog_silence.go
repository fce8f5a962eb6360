package commands

import (
	"time"
)

var watchdogSilenceSpec = &Spec{
	Path:    "watchdog silence",
	Summary: "keep the watchdog from alerting on a service for a while (maintenance)",
	Details: "For DURATION (30m, 2h, 1d; at most 7d) the watchdog neither opens an alert for the service nor reminds about one. " +
		"`watchdog silence SERVICE 1m` ends a silence early (a minute from now).",
	Examples: []string{"watchdog silence qwen 2h", "watchdog silence 30m"},
	Policy:   Policy{Role: Operator, Mutating: true},
	new:      func() Command { return new(WatchdogSilence) },
}

// WatchdogSilence is `watchdog silence [SERVICE] DURATION`: no watchdog alerts on a service for a while.
type WatchdogSilence struct {
	On
	For    time.Duration `json:"for"` // DURATION
	DryRun bool          `json:"dry_run,omitempty"`
}

// Spec returns the command's definition.
func (*WatchdogSilence) Spec() *Spec { return watchdogSilenceSpec }

func (c *WatchdogSilence) args() []arg {
	return []arg{service(&c.On), durationArg{v: &c.For}, dryRun(&c.DryRun)}
}
