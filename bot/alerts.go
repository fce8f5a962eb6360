package bot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// The door's side of the watchdog (package watchdog): its alert messages,
// which `ack` edits too, and the rule for the runs it starts itself.

// AlertText renders an incident's alert message from the store.
func AlertText(in store.Incident, _ time.Time) string {
	var b strings.Builder
	if in.Open() {
		fmt.Fprintf(&b, "🔴 incident #%d: ", in.ID)
	} else {
		fmt.Fprintf(&b, "✅ incident #%d closed: ", in.ID)
	}
	b.WriteString(in.Summary)
	if in.AckedBy != "" {
		fmt.Fprintf(&b, "\nacknowledged by %s at %s", in.AckedBy, report.Stamp(in.AckedAt))
	} else if in.Open() && IsHardwareKey(in.Service) {
		fmt.Fprintf(&b, "\n`ack %d` takes it (stops the reminders); `watchdog silence SERVICE 2h` for every service on the GPU keeps it quiet for maintenance", in.ID)
	} else if in.Open() {
		fmt.Fprintf(&b, "\n`ack %d` takes it (stops the reminders); `watchdog silence %s 2h` for maintenance", in.ID, in.Service)
	}
	return b.String()
}

// HardwareKey is the incident key of a GPU's hardware incident (the
// watchdog's, kept in the store's service column): "gpu:NODE:UUID", or the
// node's index when the UUID is unknown. No service name has a colon.
func HardwareKey(node, uuid string, index int) string {
	if uuid == "" {
		uuid = fmt.Sprint(index)
	}
	return "gpu:" + node + ":" + uuid
}

// IsHardwareKey reports whether an incident's key is a GPU's (HardwareKey).
func IsHardwareKey(key string) bool { return strings.HasPrefix(key, "gpu:") }

// alertStatus is the status an alert message shows: running while its
// incident is open, succeeded once it closed.
func alertStatus(in store.Incident) Status {
	if in.Open() {
		return StatusRunning
	}
	return StatusSucceeded
}

// EditAlerts edits every alert message of in to show it as it is now.
func EditAlerts(ctx context.Context, chats map[string]Chat, in store.Incident, final bool, log *slog.Logger) {
	for _, a := range in.Alerts {
		c := chats[a.Platform]
		if c == nil {
			continue
		}
		if err := c.Edit(ctx, Ref{Room: a.Room, ID: a.ID}, Message{Kind: KindStatus, Text: AlertText(in, time.Time{}), Final: final,
			Status: alertStatus(in)}); err != nil {
			log.Warn("edit alert", "incident", in.ID, "platform", a.Platform, "err", err)
		}
	}
}

// The watchdog's runs are the job of user "opsbot", shown as the watchdog's.
const (
	WatchdogUser     = "opsbot"
	WatchdogUserName = "opsbot (watchdog)"
)

// watchdogRun is the door's rule for the watchdog's own runs (platform
// "watchdog"): it starts `gpu recover` of its incident's service, and
// nothing else, without asking (the watchdog starts it only while the
// config in effect sets services.X.auto_recover), as user "opsbot", its
// thread in the watchdog's first room; the audit row names the incident.
func (d *Dispatcher) watchdogRun(ctx context.Context, req Request, cmd commands.Command) Reply {
	run := req.Watchdog
	// Without a room to report to, the job is on no platform: its thread is
	// only logged.
	job := Request{User: WatchdogUser, UserName: WatchdogUserName, Text: req.Text, Confirmed: true}
	if len(run.To) > 0 {
		job.Platform, job.Room = run.To[0].Platform, run.To[0].Room
	}
	if rec, ok := cmd.(*commands.GPURecover); !ok || rec.Service != run.Service {
		msg := fmt.Sprintf("watchdog incident #%d: the watchdog starts only `gpu recover %s`, not `%s`", run.Incident, run.Service, commands.Text(cmd))
		d.audit(ctx, req, commands.Text(cmd), store.DecisionInvalid, msg, 0)
		return Reply{Outcome: Invalid, Text: msg, Command: cmd, Err: errors.New(msg)}
	}
	if r, skip := d.unattended(ctx, job, cmd, fmt.Sprintf("watchdog incident #%d", run.Incident)); skip {
		return r
	}
	return d.start(ctx, job, cmd, watchdogDecision(run.Incident, run.Service))
}

// watchdogDecision is the audit decision of the watchdog's own run, which
// `job N` reads back (isWatchdogDecision) to say who decided it.
func watchdogDecision(incident int64, service string) string {
	return fmt.Sprintf("watchdog incident #%d: services.%s.auto_recover", incident, service)
}

// isWatchdogDecision reports whether decision is a watchdogDecision.
func isWatchdogDecision(decision string) bool {
	return strings.HasPrefix(decision, "watchdog incident #") && strings.HasSuffix(decision, ".auto_recover")
}

// JobCommand is the typed command job j runs, as the store keeps it (the
// watchdog reads it to tell a service stopped on purpose).
func (d *Dispatcher) JobCommand(j store.Job) (commands.Command, error) { return d.jobCommand(j) }
