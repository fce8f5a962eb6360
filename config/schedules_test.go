package config

import (
	"strings"
	"testing"
	"time"
)

func TestSchedulesAndWatchdogKeys(t *testing.T) {
	good := minimal + `timezone: Europe/Berlin
schedules:
  - {cron: "0 3 * * *", command: "sweep qwen steps 1..5", as: "slack:U1", to: "slack:C0OPS,matrix:!ops:example.org"}
  - {cron: "CRON_TZ=America/New_York @daily", command: "bench", as: "console:alice", to: "console:ops", missed: run}
watchdog: {interval: 30s, to: "slack:C0OPS"}
`
	good = strings.Replace(good, `proxmox: {node: pve, vmid: 129}}`, `proxmox: {node: pve, vmid: 129}, auto_recover: true}`, 1)
	c, err := Parse([]byte(good), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Timezone != "Europe/Berlin" || len(c.Schedules) != 2 || c.Schedules[0].Missed != MissedSkip || c.Schedules[1].Missed != MissedRun ||
		c.Watchdog.Interval.D() != 30*time.Second || c.Watchdog.To != "slack:C0OPS" || !c.Services["qwen"].AutoRecover {
		t.Fatalf("%+v", c)
	}
	d, err := Parse([]byte(minimal), "/etc/opsbot", env(nil))
	if err != nil || d.Timezone != "UTC" || d.Watchdog.Interval.D() != time.Minute || d.Watchdog.Remind.D() != 30*time.Minute {
		t.Fatalf("defaults: %+v %v", d, err)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"bad zone", "timezone: Mars/Olympus\n", "timezone: \"Mars/Olympus\""},
		{"bad cron", `schedules: [{cron: "61 * * * *", command: bench, as: "slack:U1", to: "slack:C1"}]` + "\n", "schedules[0].cron"},
		{"bad command", `schedules: [{cron: "@daily", command: "rm -rf /", as: "slack:U1", to: "slack:C1"}]` + "\n", "schedules[0].command"},
		{"unschedulable", `schedules: [{cron: "@daily", command: "jobs", as: "slack:U1", to: "slack:C1"}]` + "\n", "cannot run on a schedule"},
		{"no as", `schedules: [{cron: "@daily", command: bench, to: "slack:C1"}]` + "\n", "schedules[0].as"},
		{"no to", `schedules: [{cron: "@daily", command: bench, as: "slack:U1"}]` + "\n", "schedules[0].to is required"},
		{"bad to", `schedules: [{cron: "@daily", command: bench, as: "slack:U1", to: "irc:#ops"}]` + "\n", "unknown platform"},
		{"bad missed", `schedules: [{cron: "@daily", command: bench, as: "slack:U1", to: "slack:C1", missed: later}]` + "\n", "want run or skip"},
		{"short interval", "watchdog: {interval: 10ms}\n", "watchdog.interval"},
		{"bad watchdog to", "watchdog: {to: \"slack\"}\n", "watchdog.to"},
		{"short reminders", "watchdog: {remind: 30s}\n", "watchdog.remind: 30s is too short (at least 1m)"},
	} {
		_, err := Parse([]byte(minimal+tc.yaml), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}
