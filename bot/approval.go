package bot

import (
	"context"
	"errors"
	"fmt"

	"strings"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// Two-person approval (auth.two_person): a command the config lists waits,
// after its own confirmation, until a different person who may run it
// approves it, by a button, a reaction or `approve TOKEN` from any platform
// on the store. The request lives in the store (store.Approval) until it
// is approved, rejected or expires (auth.two_person.expires).

// Audit decisions of approvals.
const (
	DecisionApprovalAsked = "approval_asked"
	DecisionRejected      = "rejected"
)

// approvalWord reports whether text is `approve TOKEN` or `reject TOKEN`
// (after a chat's / or !), and the action it is.
func approvalWord(text string) (ActionKind, string, bool) {
	f := strings.Fields(strings.TrimLeft(text, "/!"))
	if len(f) != 2 {
		return "", "", false
	}
	switch strings.ToLower(f[0]) {
	case string(ActApprove):
		return ActApprove, strings.ToLower(f[1]), true
	case string(ActReject):
		return ActReject, strings.ToLower(f[1]), true
	}
	return "", "", false
}

// askApproval records that req's cmd waits for a second person and says
// who is awaited. confirmedBy is who confirmed it ("" when it asked no
// confirmation).
func (d *Dispatcher) askApproval(ctx context.Context, req Request, cmd commands.Command, confirmedBy string) Reply {
	now := d.opts.Now()
	expires := now.Add(d.opts.Auth.Scope().ApproveTTL())
	var tok string
	for attempt := 0; ; attempt++ {
		tok = newToken()
		err := d.opts.Store.AddApproval(ctx, store.Approval{Token: tok, Platform: req.Platform, User: req.User, UserName: req.UserName,
			Room: req.Room, Via: req.Via, ReplyTo: req.ReplyTo, Command: commands.Text(cmd), ConfirmedBy: confirmedBy,
			CreatedAt: now, Expires: expires}, now, d.opts.MaxPending, d.opts.MaxPendingPerUser)
		if errors.Is(err, store.ErrTokenTaken) && attempt < 3 {
			continue
		}
		var capped *store.ConfirmationCapError
		if errors.As(err, &capped) {
			msg := fmt.Sprintf("not asked: too many commands wait for an approval (%d of yours, %d in all); let them be approved or expire, then run `%s` again.",
				capped.Mine, capped.All, commands.Text(cmd))
			d.audit(ctx, req, commands.Text(cmd), "approval_cap", "not asked: the approval cap was reached", 0)
			return Reply{Outcome: Failed, Text: msg, Command: cmd, Err: errors.New("approval cap reached")}
		}
		if err != nil {
			d.log.Error("record an approval", "command", commands.Text(cmd), "err", err)
			return Reply{Outcome: Failed, Text: StoreDownText, Command: cmd, Err: err}
		}
		break
	}
	awaited := d.awaited(req, cmd)
	d.audit(ctx, req, commands.Text(cmd), DecisionApprovalAsked, "awaiting "+awaited+" until "+report.Clock(expires), 0)
	text := fmt.Sprintf("⏳ `%s`, asked by %s, waits for a second person: awaiting %s, until %s.\n"+
		"Approve it with `approve %s` (from any chat of this opsbot or `opsbot run`), or drop it with `reject %s`.",
		commands.Text(cmd), userLabel(req), awaited, report.Clock(expires), tok, tok)
	return Reply{Outcome: NeedsApproval, Text: text, Audience: ToRoom, Command: cmd, Token: tok, Actions: []Action{
		{ID: string(ActApprove) + ":" + tok, Kind: ActApprove, Label: "Approve", Expires: expires},
		{ID: string(ActReject) + ":" + tok, Kind: ActReject, Label: "Reject", Expires: expires},
	}}
}

// awaited says who may approve cmd for req: the users the config names who
// hold its role on every service it touches, but not req's user.
func (d *Dispatcher) awaited(req Request, cmd commands.Command) string {
	need := commands.RoleOf(cmd)
	named, services := d.opts.Auth.Approvers(cmd, req.Platform+":"+req.User, req.Platform+":"+req.Via)
	where := ""
	if len(services) > 0 {
		where = " on " + strings.Join(services, ", ")
	}
	who := fmt.Sprintf("anyone but %s with the %s role%s", userLabel(req), need, where)
	if len(named) > 0 {
		who += " (" + strings.Join(named, ", ") + ")"
	}
	return who
}

// settleApproval approves or rejects the command waiting under token, for
// req. The requester may reject (withdraw) it but never approve it; anyone
// else must hold the role the command needs on every service it touches.
func (d *Dispatcher) settleApproval(ctx context.Context, req Request, kind ActionKind, token string) Reply {
	key := req.Platform + ":" + req.User
	now := d.opts.Now()
	if r, limited := d.tooManyWrong(key, now, "approvals"); limited {
		return r
	}
	ap, err := d.opts.Store.Approval(ctx, token)
	if errors.Is(err, store.ErrNotFound) {
		if d.wrongAttempt(key, now) {
			d.audit(ctx, req, string(kind)+" (token withheld)", store.DecisionInvalid, "no approval waits under that token", 0)
		}
		return Reply{Outcome: Invalid, Text: "nothing waits for that approval: it was approved, rejected, expired or never asked.",
			Err: errors.New("unknown approval")}
	}
	if err != nil {
		d.log.Error("read an approval", "err", err)
		return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
	}
	requester := Request{Platform: ap.Platform, User: ap.User, UserName: ap.UserName, Room: ap.Room, Via: ap.Via, ReplyTo: ap.ReplyTo}
	cmd, perr := commands.Parse(ap.Command, d.commands())
	if now.After(ap.Expires) || perr != nil {
		if _, err := d.opts.Store.TakeApproval(ctx, token); err != nil {
			d.log.Warn("drop an approval", "err", err)
		}
		if perr != nil {
			d.audit(ctx, requester, ap.Command, store.DecisionInvalid, "approved command no longer valid: "+perr.Error(), 0)
			return Reply{Outcome: Invalid, Text: fmt.Sprintf("`%s` is no longer valid with opsbot's current config (%v); nothing was changed.",
				ap.Command, perr), Err: perr}
		}
		d.audit(ctx, requester, ap.Command, store.DecisionExpired, "approval expired at "+report.Clock(ap.Expires)+"; "+string(kind)+" by "+key, 0)
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("the approval of `%s` expired at %s; nothing was changed. %s may run it again.",
			ap.Command, report.Clock(ap.Expires), userLabel(requester)), Command: cmd, Err: errors.New("approval expired")}
	}
	self := sameIdentity(req, requester)
	if self && kind == ActApprove {
		msg := fmt.Sprintf("you asked for `%s`: a second person must approve it (awaiting %s); nothing was changed.",
			ap.Command, d.awaited(requester, cmd))
		d.audit(ctx, req, ap.Command, store.DecisionRefused, "the requester cannot approve their own command", 0)
		return Reply{Outcome: Refused, Text: msg, Command: cmd, Err: errors.New("self-approval")}
	}
	if !self {
		if p := d.opts.Auth.Permit(req.Platform, req.Room, req.User, cmd); !p.OK {
			msg := fmt.Sprintf("you may not %s this: %s", kind, d.opts.Auth.Refusal(req.Platform, req.Room, req.User, cmd, p))
			d.audit(ctx, req, ap.Command, store.DecisionRefused, msg, 0)
			return Reply{Outcome: Refused, Refusal: RefusedRole, Text: msg, Command: cmd, Err: &RefusedError{Need: p.Need, Have: p.Have}}
		}
	}
	taken, err := d.opts.Store.TakeApproval(ctx, token)
	if err != nil {
		d.log.Error("take an approval", "err", err)
		return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
	}
	if !taken {
		return Reply{Outcome: Invalid, Text: "that approval was just settled by someone else: nothing more was done.",
			Command: cmd, Err: errors.New("approval already settled")}
	}
	if kind == ActReject {
		who := "withdrawn by the requester"
		if !self {
			who = "rejected by " + key
		}
		d.audit(ctx, requester, ap.Command, DecisionRejected, who, 0)
		return Reply{Outcome: Answered, Audience: ToRoom, Command: cmd,
			Text: fmt.Sprintf("✖ `%s` (asked by %s) %s: nothing was changed.", ap.Command, userLabel(requester), strings.Replace(who, key, userLabel(req), 1))}
	}
	run := requester
	run.Confirmed = true
	run.UserName = userLabel(requester) + ", approved by " + userLabel(req)
	decision := "approved by " + key
	if ap.ConfirmedBy != "" && ap.ConfirmedBy != ap.Platform+":"+ap.User {
		decision += " (confirmed by " + ap.ConfirmedBy + ")"
	}
	r := d.start(ctx, run, cmd, decision)
	if r.Outcome == Queued {
		r.Text = fmt.Sprintf("✔ `%s`, asked by %s, approved by %s: #%d queued.", ap.Command, userLabel(requester), userLabel(req), r.JobID)
		r.Audience = ToRoom
	}
	return r
}

// sameIdentity reports whether a and b are one person as far as opsbot can
// tell: the same user, or one acting as the other (--as), on one platform.
func sameIdentity(a, b Request) bool {
	if a.Platform != b.Platform {
		return false
	}
	ids := func(r Request) []string {
		if r.Via != "" && r.Via != r.User {
			return []string{r.User, r.Via}
		}
		return []string{r.User}
	}
	for _, x := range ids(a) {
		for _, y := range ids(b) {
			if x == y {
				return true
			}
		}
	}
	return false
}

// unattended answers a scheduled or watchdog run (who names it) of a
// command that waits for a second person: skipped, saying so, unless
// auth.two_person.unattended lets it run alone.
func (d *Dispatcher) unattended(ctx context.Context, job Request, cmd commands.Command, who string) (Reply, bool) {
	sc := d.opts.Auth.Scope()
	if !sc.NeedsApproval(cmd) || sc.UnattendedOK(cmd) {
		return Reply{}, false
	}
	msg := fmt.Sprintf("%s skipped `%s`: it waits for a second person's approval (auth.two_person.commands), and nobody is there to give it. "+
		"Run it by hand, or let it run alone by adding %q to auth.two_person.unattended.", who, commands.Text(cmd), cmd.Spec().Path)
	return d.refuse(ctx, job, cmd, msg, errors.New("needs a second person")), true
}

// reactToApproval is a reaction (Matrix) to message that is no
// confirmation's preview: ✅ approves and ❌ rejects the approval whose
// request message shows; a reaction to anything else is ignored.
func (d *Dispatcher) reactToApproval(ctx context.Context, req Request, kind ActionKind, message string) Reply {
	ap, err := d.opts.Store.ApprovalByMessage(ctx, req.Platform, message)
	if errors.Is(err, store.ErrNotFound) {
		return Reply{Outcome: Ignored}
	}
	if err != nil {
		return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
	}
	if kind == ActAbort {
		return d.settleApproval(ctx, req, ActReject, ap.Token)
	}
	return d.settleApproval(ctx, req, ActApprove, ap.Token)
}
