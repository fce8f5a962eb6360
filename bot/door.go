package bot

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/store"
)

// Admission is where a platform takes commands from. The door (the
// Dispatcher) applies it to every request and action of that platform, once,
// before anything else is decided, and audits every refusal. A platform
// without an Admission (the console, schedules) is not restricted.
type Admission struct {
	// Rooms are the room or channel ids commands are taken from.
	Rooms []string
	// RoomNames name Rooms in messages, in order ("<#C1>" in Slack); Rooms
	// themselves when nil.
	RoomNames []string
	// RoomsKey is the config key that lists Rooms ("slack.channels").
	RoomsKey string
	// RoomWord is what the platform calls a room ("channel"; "room" when "").
	RoomWord string
	// AllowDMs admits direct messages with the bot; DMKey is its config key.
	AllowDMs bool
	DMKey    string
	// StaleAfter: a command sent longer ago than this when it arrives is
	// not run (matrix.stale_after); 0 runs commands of any age.
	StaleAfter time.Duration
}

// ClaimKeep is how long the door remembers a delivery, on every platform:
// the store prunes the claims of all platforms together, so there is one
// keep. It outlasts Slack's 5-minute signature window and its retries, and
// a Matrix sync replayed after a crash or a takeover (it resumes from the
// position stored after the last response handled, at the next sync; a
// command older than matrix.stale_after is refused as stale anyway).
const ClaimKeep = 24 * time.Hour

// Refusal says why the door refused a request before reading its command.
// Adapters choose how to show it (Matrix stays silent in a room it does not
// obey: an answer there would be public).
type Refusal string

// Refusals.
const (
	RefusedRoom  Refusal = "room"  // a room or channel off the allowlist
	RefusedDM    Refusal = "dm"    // a direct message where DMs are off
	RefusedStale Refusal = "stale" // sent longer ago than the platform's StaleAfter
	// RefusedUnreadable: the adapter could not read the delivery
	// (Request.Unreadable); nothing ran.
	RefusedUnreadable Refusal = "unreadable"
	RefusedRole       Refusal = "role" // the user lacks the role the command needs
	// RefusedConfig: what the command would change belongs to the config
	// file (a schedule of config.schedules); change it there.
	RefusedConfig Refusal = "config"
)

// Audit decisions the door writes besides the store's common ones.
const (
	DecisionReplayed = "replayed"
	DecisionStale    = "stale"
	// DecisionUndecryptable: a delivery the adapter could not read.
	DecisionUndecryptable = "undecryptable"
	// DecisionIgnored: an invitation to a room the platform does not take
	// commands from, declined.
	DecisionIgnored = "ignored"
)

// InternalErrorText answers a request whose handling panicked before a job
// was recorded.
const InternalErrorText = "internal error: nothing was changed. The error is in opsbot's log; try again, and tell its maintainers if it repeats."

// AdmissionsFromConfig returns the admission of every chat platform cfg
// configures.
func AdmissionsFromConfig(cfg *config.Config) map[string]Admission {
	adm := map[string]Admission{}
	if s := cfg.Slack; s != nil {
		names := make([]string, len(s.Channels))
		for i, c := range s.Channels {
			names[i] = "<#" + c + ">"
		}
		adm["slack"] = Admission{Rooms: s.Channels, RoomNames: names, RoomsKey: "slack.channels", RoomWord: "channel",
			AllowDMs: s.AllowDMs, DMKey: "slack.allow_dms"}
	}
	if m := cfg.Matrix; m != nil {
		adm["matrix"] = Admission{Rooms: m.Rooms, RoomsKey: "matrix.rooms", StaleAfter: m.StaleAfter.D()}
	}
	return adm
}

// ReportRooms returns the rooms cfg names for the bot's own reports when
// nothing else names them: slack.channel and the first of matrix.rooms, of
// the platforms it enables, in that order (none when it names neither).
func ReportRooms(cfg *config.Config) []Target {
	var to []Target
	if cfg.Slack != nil && cfg.Slack.Enabled && cfg.Slack.Channel != "" {
		to = append(to, Target{Platform: "slack", Room: cfg.Slack.Channel})
	}
	if cfg.Matrix != nil && cfg.Matrix.Enabled && len(cfg.Matrix.Rooms) > 0 {
		to = append(to, Target{Platform: "matrix", Room: cfg.Matrix.Rooms[0]})
	}
	return to
}

// SetReportRooms sets where a schedule added without --to in a transient
// chat (a terminal) reports (ReportRooms of the config; at start and on
// reload). With none, such a schedule is refused.
func (d *Dispatcher) SetReportRooms(to []Target) {
	c := append([]Target(nil), to...)
	d.reportRooms.Store(&c)
}

// transient reports whether nobody reads platform's rooms once this process
// ends: its Chat says so, or this process has none for it.
func (d *Dispatcher) transient(platform string) bool {
	if d.opts.Engine == nil {
		return false
	}
	c, ok := d.opts.Engine.Chats()[platform]
	if !ok || c == nil {
		return true
	}
	t, ok := c.(Transient)
	return ok && t.Transient()
}

// SetAdmissions replaces the admission rules of every platform (at start
// and on reload); platforms not in adm are no longer restricted.
func (d *Dispatcher) SetAdmissions(adm map[string]Admission) {
	c := make(map[string]Admission, len(adm))
	for k, v := range adm {
		c[k] = v
	}
	d.admissions.Store(&c)
}

func (d *Dispatcher) admission(platform string) (Admission, bool) {
	m := d.admissions.Load()
	if m == nil {
		return Admission{}, false
	}
	a, ok := (*m)[platform]
	return a, ok
}

// door makes the decisions every request and action of every platform goes
// through first, in this order: the delivery's durable claim (a replay runs
// nothing, whichever process gets it), the room or DM, what the adapter
// could not read or an invitation (they stop here, admitted or not), and
// the age. It returns the reply and true when the request stops here.
func (d *Dispatcher) door(ctx context.Context, req Request, text string, stale bool) (Reply, bool) {
	adm, restricted := d.admission(req.Platform)
	if req.Delivery != "" {
		c, err := d.opts.Store.ClaimDelivery(ctx, req.Platform, req.Delivery, ClaimKeep)
		if err != nil {
			d.log.Error("claim a delivery; it is not acted on", "platform", req.Platform, "delivery", req.Delivery, "err", err)
			return Reply{Outcome: Failed, Text: StoreDownText, Err: err}, true
		}
		if !c.First {
			if c.Replays == 1 {
				d.audit(ctx, req, clip(text), DecisionReplayed, fmt.Sprintf(
					"delivery %s came again and was not run; further replays of it are counted (opsbot_requests_total{outcome=\"duplicate\"}), not audited", req.Delivery), 0)
			}
			return Reply{Outcome: Duplicate, Text: "replayed delivery: already handled", Err: ErrDuplicate}, true
		}
	}
	if restricted {
		if r, stop := d.admit(ctx, req, text, adm); stop {
			return r, true
		}
	}
	switch {
	case req.Invite:
		return Reply{Outcome: Answered}, true
	case req.Unreadable != "":
		d.audit(ctx, req, clip(text), DecisionUndecryptable, req.Unreadable, 0)
		return Reply{Outcome: Refused, Refusal: RefusedUnreadable, Text: "opsbot could not read this message (" + req.Unreadable + "): nothing was run.",
			Err: errors.New("unreadable delivery")}, true
	}
	if age := d.opts.Now().Sub(req.SentAt); restricted && stale && adm.StaleAfter > 0 && !req.SentAt.IsZero() && age > adm.StaleAfter {
		d.audit(ctx, req, clip(text), DecisionStale, fmt.Sprintf("sent %s ago, over the platform's stale_after %s",
			age.Round(time.Second), adm.StaleAfter), 0)
		msg := fmt.Sprintf("stale, not run: `%s` was sent at %s UTC, %s ago, while opsbot was not listening "+
			"(commands older than %s are not run when they arrive late). Send it again if it still applies.",
			clip(text), req.SentAt.UTC().Format("15:04:05"), age.Round(time.Second), adm.StaleAfter)
		return Reply{Outcome: Refused, Refusal: RefusedStale, Text: msg, Err: errors.New("stale command")}, true
	}
	return Reply{}, false
}

// admit applies the platform's room and DM allowlists to req; it returns
// the audited refusal and true when req is not admitted. An invitation to a
// room off the list is declined (DecisionIgnored).
func (d *Dispatcher) admit(ctx context.Context, req Request, text string, adm Admission) (Reply, bool) {
	if req.DM && !adm.AllowDMs {
		msg := fmt.Sprintf("opsbot takes no commands in direct messages here (%s is off): run it in %s.", adm.DMKey, adm.where())
		d.audit(ctx, req, clip(text), store.DecisionRefused, "a direct message, and "+adm.DMKey+" is off", 0)
		return Reply{Outcome: Refused, Refusal: RefusedDM, Text: msg, Err: errors.New("direct messages are off")}, true
	}
	if req.DM || slices.Contains(adm.Rooms, req.Room) {
		return Reply{}, false
	}
	if req.Invite {
		d.audit(ctx, req, clip(text), DecisionIgnored, "invite declined: the room is not in "+adm.RoomsKey, 0)
		return Reply{Outcome: Refused, Refusal: RefusedRoom, Err: errors.New("room not allowed")}, true
	}
	word := adm.RoomWord
	if word == "" {
		word = "room"
	}
	msg := fmt.Sprintf("opsbot takes no commands in this %s: run it in %s, or ask an admin to add this %s's id to %s.",
		word, adm.where(), word, adm.RoomsKey)
	d.audit(ctx, req, clip(text), store.DecisionRefused, "the room is not in "+adm.RoomsKey, 0)
	return Reply{Outcome: Refused, Refusal: RefusedRoom, Text: msg, Err: errors.New("room not allowed")}, true
}

// where names the rooms commands are taken in.
func (a Admission) where() string {
	names := a.RoomNames
	if names == nil {
		names = a.Rooms
	}
	switch {
	case len(names) > 0 && a.AllowDMs:
		return strings.Join(names, ", ") + " or a direct message"
	case len(names) > 0:
		return strings.Join(names, ", ")
	case a.AllowDMs:
		return "a direct message"
	}
	return "no room yet (" + a.RoomsKey + " is empty)"
}

// ErrDuplicate is the error of a delivery the door saw before.
var ErrDuplicate = errors.New("replayed delivery")

// StoreDownText answers a request the door could not record.
const StoreDownText = "opsbot cannot reach its store: nothing was started. Try again in a minute; `/readyz` says when it can."

// recovered turns a panic while handling a request or an action into a
// logged, counted internal error, so that no adapter loop dies of it. It is
// deferred by Handle and Act; r is their reply.
// committed is the job a request recorded, if any.
func (d *Dispatcher) recovered(r *Reply, committed *int64, what, platform, text string) {
	p := recover()
	if p == nil {
		return
	}
	d.log.Error("panic while handling a "+what, "platform", platform, "text", clip(text), "panic", p, "stack", string(debug.Stack()))
	msg := InternalErrorText
	if id := *committed; id != 0 {
		msg = fmt.Sprintf("internal error after job #%d was recorded: see what became of it with `job %d`.", id, id)
	}
	*r = Reply{Outcome: InternalError, Text: msg, JobID: *committed, Err: fmt.Errorf("panic: %v", p)}
}

type committedKey struct{}

// withCommitted returns ctx carrying where start notes the job it records,
// for recovered.
func withCommitted(ctx context.Context) (context.Context, *int64) {
	var id int64
	return context.WithValue(ctx, committedKey{}, &id), &id
}

// noteCommitted notes that the request of ctx recorded job id.
func noteCommitted(ctx context.Context, id int64) {
	if p, ok := ctx.Value(committedKey{}).(*int64); ok {
		*p = id
	}
}

// clip shortens user text for audit rows and messages.
func clip(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return string(r) + "…"
}
