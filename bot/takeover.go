package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// The rollback of an interrupted rollout is the job of user "opsbot",
// shown as the takeover's.
const (
	TakeoverUser     = "opsbot"
	TakeoverUserName = "opsbot (takeover)"
)

// takeoverWhy is why an interrupted rollout is rolled back, not resumed.
const takeoverWhy = "a rollout interrupted before its end is rolled back, not resumed: its gate's judgement and its waves' " +
	"verification did not finish, so the only state known good is the previous units, and resuming would roll out a change nobody saw pass"

// takeover is the door's rule for a job of a dead opsbot process that
// this process recorded interrupted (jobs.Engine.SetTakeover): a rollout
// whose last checkpoint (the job's result so far, ops.RolloutResult)
// records replicas changed and not put back is rolled back by `mtp undo
// GROUP`, started here through the door as user "opsbot", without asking
// (the change it puts back was confirmed; what it restores ran before),
// audited with the interrupted job's id; its thread goes to the
// interrupted job's room. It returns what that room is told.
func (d *Dispatcher) takeover(ctx context.Context, j store.Job) string {
	if len(j.Result) == 0 {
		return ""
	}
	var res ops.Result
	if err := json.Unmarshal(j.Result, &res); err != nil || res.Rollout == nil {
		return ""
	}
	ro := res.Rollout
	left := ro.LeftChanged()
	if len(left) == 0 {
		return fmt.Sprintf("The rollout had changed no replica of %s yet, so nothing is rolled back.", ro.Group)
	}
	changed := make([]string, len(left))
	for i, rc := range left {
		changed[i] = rc.Service
		if rc.Move != "" {
			changed[i] += " (" + rc.Move + ")"
		}
	}
	what := "changing " + strings.Join(changed, ", ")
	if ro.Undoes != 0 {
		what = fmt.Sprintf("putting back #%d on %s", ro.Undoes, strings.Join(changed, ", "))
	}
	text := "mtp undo " + ro.Group
	cmd, err := commands.Parse(text, d.commands())
	if err != nil {
		// The group is no longer configured as one: nobody can undo it here.
		d.log.Error("roll back an interrupted rollout", "job", j.ID, "err", err)
		return fmt.Sprintf("The rollout was interrupted after %s; it cannot be rolled back with this configuration (%v): put each replica back by hand (`mtp undo REPLICA`).",
			what, err)
	}
	req := Request{Platform: j.Platform, Room: j.Room, User: TakeoverUser, UserName: TakeoverUserName,
		Text: commands.Text(cmd), Confirmed: true}
	r := d.start(ctx, req, cmd, takeoverDecision(j.ID))
	if r.JobID == 0 || r.Outcome == Failed {
		d.log.Error("roll back an interrupted rollout", "job", j.ID, "err", r.Err)
		return fmt.Sprintf("The rollout was interrupted after %s; it could not be rolled back now (%s): `%s` puts every changed replica back on its previous unit. Why: %s.",
			what, r.Text, commands.Text(cmd), takeoverWhy)
	}
	return fmt.Sprintf("The rollout was interrupted after %s; rolling back: #%d (`%s`). Why: %s.", what, r.JobID, commands.Text(cmd), takeoverWhy)
}

// takeoverDecision is the audit decision of the rollback of interrupted
// job id.
func takeoverDecision(id int64) string {
	return fmt.Sprintf("takeover of interrupted rollout #%d: rolled back", id)
}
