package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
)

// Schedule is a command the config runs on a cron schedule.
type Schedule struct {
	// Cron is a standard 5-field spec, a descriptor or @every D, optionally
	// prefixed by CRON_TZ=Zone.
	Cron string `yaml:"cron"`
	// Command is a schedulable job command ("sweep qwen steps 1..5").
	Command string `yaml:"command"`
	// As is the auth key the runs are authorised as ("slack:U024BE7LH"): each
	// run needs that user to hold the command's role at run time.
	As string `yaml:"as"`
	// To are the rooms the runs report to: "slack:C0OPS,matrix:!room:hs".
	To string `yaml:"to"`
	// Missed says what a run missed while no opsbot was up becomes: "run"
	// (once, at start) or "skip" (default).
	Missed string `yaml:"missed,omitempty"`
}

// Schedule missed-run policies.
const (
	MissedRun  = "run"
	MissedSkip = "skip"
)

// Watchdog configures the watch over every service's state.
type Watchdog struct {
	// Interval between passes (default DefaultWatchdogInterval).
	Interval Duration `yaml:"interval,omitempty"`
	// To are the rooms alerts go to ("slack:C0OPS,matrix:!room:hs"); unset,
	// the Slack channel and the first Matrix room.
	To string `yaml:"to,omitempty"`
	// Remind is how long an unacknowledged alert waits between reminders
	// (default DefaultWatchdogRemind, at least a minute).
	Remind Duration `yaml:"remind,omitempty"`
	// Hardware is the watch over the GPUs' hardware (watchdog.hardware).
	Hardware WatchdogHardware `yaml:"hardware,omitempty"`
}

// WatchdogHardware configures the watchdog's hardware checks: each pass
// reads every node's GPU health (as `gpu health` does) and alerts once per
// GPU on a new paging XID, a new uncorrected ECC error, a pending row remap
// or (with PCIe) a degraded PCIe link.
type WatchdogHardware struct {
	// Enabled turns the checks on (default true).
	Enabled *bool `yaml:"enabled,omitempty"`
	// XIDs are the XIDs that page (default DefaultPagingXIDs).
	XIDs []int `yaml:"xids,omitempty"`
	// PCIe pages on a PCIe link below its maximum (default true).
	PCIe *bool `yaml:"pcie,omitempty"`
}

// On reports whether the hardware checks run.
func (h WatchdogHardware) On() bool { return h.Enabled == nil || *h.Enabled }

// PagesOnLink reports whether a degraded PCIe link pages.
func (h WatchdogHardware) PagesOnLink() bool { return h.PCIe == nil || *h.PCIe }

// validateSchedules checks timezone, schedules and watchdog.
func (c *Config) validateSchedules(bad func(string, ...any)) {
	if _, err := time.LoadLocation(c.Timezone); err != nil || c.Timezone == "Local" {
		bad("timezone: %q is not an IANA time zone (e.g. UTC, Europe/Berlin)", c.Timezone)
	}
	if c.Watchdog.Interval.D() < time.Second {
		bad("watchdog.interval: %s is too short (at least 1s)", c.Watchdog.Interval.D())
	}
	if c.Watchdog.Remind.D() < time.Minute {
		bad("watchdog.remind: %s is too short (at least 1m): a reminder is a message to everyone in the room", c.Watchdog.Remind.D())
	}
	for _, x := range c.Watchdog.Hardware.XIDs {
		if x <= 0 || x > 1000 {
			bad("watchdog.hardware.xids: %d is not an XID (NVIDIA's are 1 to a few hundred)", x)
		}
	}
	if c.Watchdog.To != "" {
		if _, err := commands.ParseTargets(c.Watchdog.To); err != nil {
			bad("watchdog.to: %v", err)
		}
	}
	opts := c.CommandOptions()
	for i, s := range c.Schedules {
		key := fmt.Sprintf("schedules[%d]", i)
		if _, err := commands.ValidateCron(s.Cron); err != nil {
			bad("%s.cron: %v", key, err)
		}
		if strings.TrimSpace(s.Command) == "" {
			bad("%s.command is required (e.g. sweep qwen steps 1..5)", key)
		} else if opts.Validate() == nil {
			if cmd, err := commands.Parse(s.Command, opts); err != nil {
				bad("%s.command: %v", key, err)
			} else if !cmd.Spec().Schedulable || commands.IsDryRun(cmd) {
				bad("%s.command: %s cannot run on a schedule (%s can)", key, cmd.Spec().Path, commands.SchedulableList())
			}
		}
		if p, id, ok := strings.Cut(s.As, ":"); !ok || p == "" || id == "" || strings.ContainsAny(s.As, " \t\n") {
			bad("%s.as: the user the runs are authorised as, as in auth.users (e.g. slack:U024BE7LH)", key)
		}
		if s.To == "" {
			bad("%s.to is required: the rooms its runs report to (e.g. slack:C0OPS)", key)
		} else if _, err := commands.ParseTargets(s.To); err != nil {
			bad("%s.to: %v", key, err)
		}
		if s.Missed != MissedRun && s.Missed != MissedSkip {
			bad("%s.missed: %q: want run or skip", key, s.Missed)
		}
	}
}
