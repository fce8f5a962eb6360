package bot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/opsbot/opsbot/auth"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// Confirmation limits.
const (
	// TokenBytes is the size of a confirmation token: 128 random bits,
	// written as 32 hex digits.
	TokenBytes = 16
	// DefaultMaxPending is how many confirmations may wait at once.
	DefaultMaxPending = 256
	// DefaultMaxPendingPerUser is how many of them one user may have asked.
	DefaultMaxPendingPerUser = 8
	// DefaultWrongLimit is how many wrong confirmation attempts a user may
	// make per DefaultWrongWindow before every attempt is refused until the
	// window ends.
	DefaultWrongLimit  = 5
	DefaultWrongWindow = time.Minute
)

// DispatcherOptions configure a Dispatcher.
type DispatcherOptions struct {
	Store    *store.Store
	Engine   *jobs.Engine
	Auth     *auth.Auth
	Commands commands.Options
	// ConfirmTTL is how long a confirmation stays valid (default 2 minutes).
	ConfirmTTL time.Duration
	// MaxPending and MaxPendingPerUser cap the confirmations waiting at once
	// (defaults DefaultMaxPending, DefaultMaxPendingPerUser).
	MaxPending, MaxPendingPerUser int
	// WrongLimit wrong confirmation attempts per WrongWindow and user are
	// answered; later ones are refused until the window ends (defaults
	// DefaultWrongLimit, DefaultWrongWindow).
	WrongLimit  int
	WrongWindow time.Duration
	Logger      *slog.Logger
	Now         func() time.Time
	// Timezone is the zone of cron specs without CRON_TZ= (config
	// timezone); nil is UTC.
	Timezone *time.Location
	// ConfigFile is the config file, named where an answer sends people to
	// change it; "" when unknown.
	ConfigFile string
}

// Dispatcher turns requests into jobs: parse, authorise, confirm, record,
// submit. It is the only place those decisions are made. Safe for concurrent use.
type Dispatcher struct {
	opts DispatcherOptions
	log  *slog.Logger

	// cmds is opts.Commands, replaced by Reload.
	cmds     atomic.Pointer[commands.Options]
	draining atomic.Bool

	// admissions are the platforms' Admission rules, replaced on reload.
	admissions atomic.Pointer[map[string]Admission]
	// reportRooms are where a schedule added in a transient chat without
	// --to reports (SetReportRooms).
	reportRooms atomic.Pointer[[]Target]

	// wrong counts wrong confirmation attempts per "platform:user": a rate
	// limit of this process (confirmations themselves are in the store).
	mu    sync.Mutex
	wrong map[string]*wrongBurst
}

// wrongBurst counts one user's wrong confirmation attempts since start.
type wrongBurst struct {
	start time.Time
	n     int
}

// NewDispatcher returns a dispatcher.
func NewDispatcher(opts DispatcherOptions) *Dispatcher {
	if opts.ConfirmTTL <= 0 {
		opts.ConfirmTTL = config.DefaultConfirmTTL
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxPendingPerUser <= 0 {
		opts.MaxPendingPerUser = DefaultMaxPendingPerUser
	}
	if opts.WrongLimit <= 0 {
		opts.WrongLimit = DefaultWrongLimit
	}
	if opts.WrongWindow <= 0 {
		opts.WrongWindow = DefaultWrongWindow
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	d := &Dispatcher{opts: opts, log: log, wrong: map[string]*wrongBurst{}}
	d.cmds.Store(&opts.Commands)
	if opts.Engine != nil {
		// A rollout a dead process left changed is rolled back through here.
		opts.Engine.SetTakeover(d.takeover)
	}
	return d
}

// Handle answers one request within milliseconds: a job is queued and runs in
// the background, or the request is answered, refused or rejected at once.
// Nothing is started unless the whole command parsed and was authorised.
// Typing `confirm TOKEN` is the Confirm action of text-only chats, under the
// same rules as a click.
//
// First of all, the door: the delivery's durable claim, the room and the
// command's age (see door); a request stopped there runs nothing. A panic
// while handling is recovered and answered InternalError.
func (d *Dispatcher) Handle(ctx context.Context, req Request) (r Reply) {
	ctx, committed := withCommitted(ctx)
	defer d.recovered(&r, committed, "request", req.Platform, req.Text)
	if d.draining.Load() {
		return restarting()
	}
	text := strings.TrimSpace(req.Text)
	if r, bad := d.checkRequest(ctx, req, text); bad {
		return r
	}
	if r, stop := d.door(ctx, req, text, true); stop {
		return r
	}
	if tok, ok := confirmToken(text); ok && len(req.Text) <= commands.MaxInputLen {
		return d.act(ctx, ActionRequest{ID: string(ActConfirm) + ":" + tok, Platform: req.Platform, User: req.User,
			UserName: req.UserName, Room: req.Room, Via: req.Via, DM: req.DM})
	}
	if kind, tok, ok := approvalWord(text); ok && len(req.Text) <= commands.MaxInputLen {
		return d.act(ctx, ActionRequest{ID: string(kind) + ":" + tok, Platform: req.Platform, User: req.User,
			UserName: req.UserName, Room: req.Room, Via: req.Via, DM: req.DM})
	}
	if word, ok := yesWord(text); ok {
		return d.confirmPending(ctx, req, word)
	}
	// The length limit applies to the text as typed: Parse trims it itself.
	cmd, err := commands.Parse(req.Text, d.commands())
	if err != nil {
		d.audit(ctx, req, text, store.DecisionInvalid, err.Error(), 0)
		return Reply{Outcome: Invalid, Text: err.Error(), Err: err}
	}
	if req.Platform == PlatformSchedule {
		return d.scheduled(ctx, req, cmd)
	}
	if req.Platform == PlatformWatchdog {
		return d.watchdogRun(ctx, req, cmd)
	}
	if r, bad := d.checkVia(ctx, req, cmd); bad {
		return r
	}
	if p := d.opts.Auth.Permit(req.Platform, req.Room, req.User, cmd); !p.OK {
		return d.refuseRole(ctx, req, cmd, p)
	}
	if r, refused := d.nothingToUndo(ctx, req, cmd); refused {
		return r
	}
	if commands.NeedsConfirm(cmd) && !req.Confirmed {
		if add, ok := cmd.(*commands.ScheduleAdd); ok {
			if r, bad := vetScheduleAdd(d, req, add); bad {
				d.audit(ctx, req, commands.Text(cmd), store.DecisionInvalid, r.Text, 0)
				return r
			}
		}
		return d.askConfirm(ctx, req, cmd, offer{})
	}
	if d.opts.Auth.Scope().NeedsApproval(cmd) {
		return d.askApproval(ctx, req, cmd, "")
	}
	return d.start(ctx, req, cmd, store.DecisionAccepted)
}

// checkRequest rejects requests an adapter should never send: no user, a
// schedule on another platform or a scheduled run without its schedule.
func (d *Dispatcher) checkRequest(ctx context.Context, req Request, text string) (Reply, bool) {
	var problem string
	switch {
	case req.Platform == "" || (req.User == "" && req.Platform != PlatformSchedule):
		problem = "a request needs a platform and a user id"
	case (req.Platform == PlatformSchedule) != (req.Schedule != nil):
		problem = "only scheduled runs come from platform schedule, and each carries its schedule"
	case (req.Platform == PlatformWatchdog) != (req.Watchdog != nil):
		problem = "only the watchdog's runs come from platform watchdog, and each carries its incident"
	case req.Schedule != nil && !auth.ValidKey(req.Schedule.Creator):
		problem = fmt.Sprintf("schedule #%d: creator %q is not a platform:id key", req.Schedule.ID, req.Schedule.Creator)
	default:
		return Reply{}, false
	}
	err := errors.New(problem)
	d.log.Error("bad request from an adapter", "platform", req.Platform, "err", err)
	if req.Platform != "" {
		d.audit(ctx, req, text, store.DecisionInvalid, problem, 0)
	}
	return Reply{Outcome: Invalid, Text: "request not accepted: " + problem, Err: err}, true
}

// checkVia refuses a request made as another user unless the one acting is
// an admin (viaRefusal).
func (d *Dispatcher) checkVia(ctx context.Context, req Request, cmd commands.Command) (Reply, bool) {
	msg, err := d.viaRefusal(req.Platform, req.User, req.Via)
	if err == nil {
		return Reply{}, false
	}
	return d.refuse(ctx, req, cmd, msg, err), true
}

// viaRefusal is the one rule of acting as another user (a terminal's `--as
// ID`), for requests and actions alike: via may act as user on platform
// only when via is user or holds the admin role there. Otherwise it returns
// what to tell them and a *RefusedError.
func (d *Dispatcher) viaRefusal(platform, user, via string) (string, error) {
	if via == "" || via == user {
		return "", nil
	}
	have := d.opts.Auth.Role(platform, via)
	if have == commands.Admin {
		return "", nil
	}
	return fmt.Sprintf("acting as %s:%s needs the admin role; %s:%s has %s. Run it as yourself (without --as).",
		platform, user, platform, via, auth.RoleName(have)), &RefusedError{Need: commands.Admin, Have: have}
}

func (d *Dispatcher) refuseRole(ctx context.Context, req Request, cmd commands.Command, p auth.Decision) Reply {
	msg := d.opts.Auth.Refusal(req.Platform, req.Room, req.User, cmd, p)
	if hint := d.opts.Auth.LevelHint(req.Platform, req.Room, req.User, p.Need); hint != "" {
		msg += " Or: " + hint + "."
	}
	r := d.refuse(ctx, req, cmd, msg, &RefusedError{Need: p.Need, Have: p.Have})
	r.Refusal = RefusedRole
	return r
}

// refuse records a refused job and its audit entry together, so the audit
// row names the job.
func (d *Dispatcher) refuse(ctx context.Context, req Request, cmd commands.Command, msg string, err error) Reply {
	job, cErr := d.opts.Store.CreateJobAudited(context.WithoutCancel(ctx), jobOf(cmd, store.Job{Platform: req.Platform,
		User: req.User, Room: req.Room, Status: store.Refused, Error: msg, ScheduleID: scheduleID(req)}),
		store.AuditEntry{At: d.opts.Now(), Platform: req.Platform, User: req.User, Room: req.Room, Command: commands.Text(cmd),
			Decision: store.DecisionRefused, Detail: d.detail(req, msg)})
	if cErr != nil {
		d.log.Error("record refused job", "command", commands.Text(cmd), "err", cErr)
	}
	return Reply{Outcome: Refused, Text: msg, JobID: job.ID, Command: cmd, Err: err}
}

// jobOf is j with what the store keeps of cmd: its canonical text, its
// typed arguments (commands.Encode), whether it is a dry run, and the
// service and host it acts on.
func jobOf(cmd commands.Command, j store.Job) store.Job {
	on := commands.Where(cmd)
	j.Command, j.Service, j.Host, j.DryRun = commands.Text(cmd), on.Service, on.Host, commands.IsDryRun(cmd)
	// Encode fails only for a command without its parts (a schedule
	// without its command), which Parse never returns.
	j.Args, _ = commands.Encode(cmd)
	return j
}

func scheduleID(req Request) int64 {
	if req.Schedule != nil {
		return req.Schedule.ID
	}
	return 0
}

// RefusedError says a user lacks the role a command needs.
type RefusedError struct{ Need, Have commands.Role }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("needs role %s, have %s", e.Need, auth.RoleName(e.Have))
}

// scheduled runs a command that came through the door of platform schedule:
// with the role its creator holds now, without asking (the creator confirmed
// it when adding the schedule), reporting to the schedule's first room. A
// role the creator holds by power level counts in the first target room on
// the creator's platform.
func (d *Dispatcher) scheduled(ctx context.Context, req Request, cmd commands.Command) Reply {
	run := req.Schedule
	platform, user, _ := strings.Cut(run.Creator, ":")
	// The job is the creator's; its thread goes to the first target room, on
	// that room's platform.
	job := Request{Platform: PlatformSchedule, User: run.Creator, UserName: run.Creator, Schedule: run, Confirmed: true}
	if len(run.To) > 0 {
		job.Platform, job.Room = run.To[0].Platform, run.To[0].Room
	}
	if !cmd.Spec().Schedulable {
		msg := fmt.Sprintf("schedule #%d: `%s` cannot run on a schedule", run.ID, commands.Text(cmd))
		d.audit(ctx, job, commands.Text(cmd), store.DecisionInvalid, msg, 0)
		return Reply{Outcome: Invalid, Text: msg, Command: cmd, Audience: ToRoom, Rooms: run.To, Err: errors.New(msg)}
	}
	room := ""
	for _, t := range run.To {
		if t.Platform == platform {
			room = t.Room
			break
		}
	}
	if p := d.opts.Auth.Permit(platform, room, user, cmd); !p.OK {
		where := ""
		if len(p.Lacking) > 0 && d.opts.Auth.Scoped(platform, user) {
			where = " on " + strings.Join(p.Lacking, ", ")
		}
		msg := fmt.Sprintf("schedule #%d did not run `%s`: its creator %s has the %s role%s now and it needs %s. "+
			"An admin can re-add it (`schedule rm %d`, then `schedule add`).", run.ID, commands.Text(cmd), run.Creator, auth.RoleName(p.Have), where, p.Need, run.ID)
		r := d.refuse(ctx, job, cmd, msg, &RefusedError{Need: p.Need, Have: p.Have})
		r.Audience, r.Rooms = ToRoom, run.To
		return r
	}
	if r, skip := d.unattended(ctx, job, cmd, fmt.Sprintf("schedule #%d", run.ID)); skip {
		r.Audience, r.Rooms = ToRoom, run.To
		return r
	}
	r := d.start(ctx, job, cmd, fmt.Sprintf("scheduled #%d by %s", run.ID, run.Creator))
	r.Audience, r.Rooms = ToRoom, run.To
	return r
}

// Propose asks a room to confirm a command the bot itself suggests (a
// watchdog's `gpu recover`). The proposal belongs to the room: anyone there
// who holds the role the command needs may confirm or abort it.
func (d *Dispatcher) Propose(ctx context.Context, platform, room, text, reason string) Reply {
	req := Request{Platform: platform, User: "opsbot", Room: room, Text: text}
	cmd, err := commands.Parse(strings.TrimSpace(text), d.commands())
	if err != nil {
		d.audit(ctx, req, text, store.DecisionInvalid, "proposal: "+err.Error(), 0)
		return Reply{Outcome: Invalid, Text: err.Error(), Err: err}
	}
	r := d.askConfirm(ctx, req, cmd, offer{proposed: true})
	if reason != "" && r.Outcome == NeedsConfirm {
		r.Text = reason + "\n" + r.Text
	}
	return r
}

// ProposeForIncident is Propose for the alert of a watchdog incident: the
// offer holds as long as the incident is open, across restarts (not
// limits.confirm_ttl), and ends when it closes. Whoever settles it must
// hold the command's role when they do.
func (d *Dispatcher) ProposeForIncident(ctx context.Context, platform, room, text string, incident int64) Reply {
	req := Request{Platform: platform, User: "opsbot", Room: room, Text: text}
	cmd, err := commands.Parse(strings.TrimSpace(text), d.commands())
	if err != nil {
		d.audit(ctx, req, text, store.DecisionInvalid, "proposal: "+err.Error(), 0)
		return Reply{Outcome: Invalid, Text: err.Error(), Err: err}
	}
	return d.askConfirm(ctx, req, cmd, offer{proposed: true, incident: incident})
}

// offer says who may settle a confirmation and how long it holds: the
// requester until limits.confirm_ttl; when proposed, anyone in the room
// with the role; for an incident, while that incident is open.
type offer struct {
	proposed bool
	incident int64
}

func (d *Dispatcher) askConfirm(ctx context.Context, req Request, cmd commands.Command, o offer) Reply {
	proposed := o.proposed
	now := d.opts.Now()
	expires := now.Add(d.opts.ConfirmTTL)
	var tok string
	for attempt := 0; ; attempt++ {
		tok = newToken()
		err := d.opts.Store.AddConfirmation(ctx, store.Confirmation{Token: tok, Platform: req.Platform, User: req.User,
			UserName: req.UserName, Room: req.Room, Via: req.Via, ReplyTo: req.ReplyTo, Command: commands.Text(cmd), Proposed: proposed,
			CreatedAt: now, Expires: expires, Incident: o.incident}, now, d.opts.MaxPending, d.opts.MaxPendingPerUser)
		if errors.Is(err, store.ErrTokenTaken) && attempt < 3 {
			continue // a new confirmation never replaces another
		}
		var capped *store.ConfirmationCapError
		if errors.As(err, &capped) {
			msg := fmt.Sprintf("not asked: too many confirmations are waiting (%d of yours, %d in all); confirm or let them expire (%s), then run `%s` again.",
				capped.Mine, capped.All, d.opts.ConfirmTTL, commands.Text(cmd))
			d.audit(ctx, req, commands.Text(cmd), "confirm_cap", "not asked: the confirmation cap was reached", 0)
			return Reply{Outcome: Failed, Text: msg, Command: cmd, Err: errors.New("confirmation cap reached")}
		}
		if err != nil {
			d.log.Error("record a confirmation", "command", commands.Text(cmd), "err", err)
			return Reply{Outcome: Failed, Text: StoreDownText, Command: cmd, Err: err}
		}
		break
	}

	who := "Reply"
	aud := ToUser
	if proposed {
		who = fmt.Sprintf("Anyone with the %s role may reply", commands.RoleOf(cmd))
		aud = ToRoom
	}
	preview := commands.PreviewIn(cmd, *d.cmds.Load())
	text := fmt.Sprintf("%s\n%s `confirm %s` within %s to go ahead, or run it with --dry-run to see the plan.",
		preview, who, tok, d.opts.ConfirmTTL)
	until := "until " + report.Clock(expires)
	if o.incident != 0 {
		// The offer lasts as long as the incident: no expiry to show.
		text = fmt.Sprintf("%s\n%s `confirm %s` while incident #%d is open to go ahead, or run it with --dry-run to see the plan.",
			preview, who, tok, o.incident)
		until, expires = fmt.Sprintf("while incident #%d is open", o.incident), time.Time{}
	}
	d.audit(ctx, req, commands.Text(cmd), "confirm_asked", until, 0)
	return Reply{Outcome: NeedsConfirm, Text: text, Preview: preview, Audience: aud, Command: cmd, Token: tok, Actions: []Action{
		{ID: string(ActConfirm) + ":" + tok, Kind: ActConfirm, Label: "Confirm", Expires: expires},
		{ID: string(ActAbort) + ":" + tok, Kind: ActAbort, Label: "Abort", Expires: expires},
	}}
}

// Act performs an action a Reply offered, for the user who clicked it:
//   - Confirm runs the previewed command. Only the user who asked may confirm
//     it (a proposal of the bot: anyone with the role), in the room it was
//     asked in, once, before it expires, and only while they hold the role.
//   - Abort drops it, under the same rules.
//   - Cancel stops a queued or running job: its user's or an admin's.
//
// A refused or wrong attempt leaves every pending confirmation as it was.
// Wrong attempts (unknown tokens, someone else's confirmation) are limited per
// user and audited once per burst.
func (d *Dispatcher) Act(ctx context.Context, a ActionRequest) (r Reply) {
	ctx, committed := withCommitted(ctx)
	defer d.recovered(&r, committed, "action", a.Platform, a.ID)
	if d.draining.Load() {
		return restarting()
	}
	req := Request{Platform: a.Platform, User: a.User, UserName: a.UserName, Room: a.Room, Via: a.Via, Delivery: a.Delivery, DM: a.DM}
	kind, _, _ := strings.Cut(a.ID, ":")
	if r, bad := d.checkRequest(ctx, req, kind); bad {
		return r
	}
	if r, stop := d.door(ctx, req, kind, false); stop {
		return r
	}
	return d.act(ctx, a)
}

// act is Act past the door.
func (d *Dispatcher) act(ctx context.Context, a ActionRequest) Reply {
	req := Request{Platform: a.Platform, User: a.User, UserName: a.UserName, Room: a.Room, Via: a.Via, DM: a.DM}
	kind, arg, _ := strings.Cut(a.ID, ":")
	if msg, err := d.viaRefusal(a.Platform, a.User, a.Via); err != nil {
		d.audit(ctx, req, kind, store.DecisionRefused, msg, 0)
		return Reply{Outcome: Refused, Text: msg, Err: err}
	}
	switch ActionKind(kind) {
	case ActConfirm, ActAbort:
		if arg == "" && a.Message != "" {
			// A reaction: the confirmation is the one the message shows.
			c, err := d.opts.Store.ConfirmationByMessage(ctx, a.Platform, a.Message)
			if errors.Is(err, store.ErrNotFound) {
				return d.reactToApproval(ctx, req, ActionKind(kind), a.Message)
			}
			if err != nil {
				return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
			}
			arg = c.Token
		}
		return d.settle(ctx, req, ActionKind(kind), arg)
	case ActApprove, ActReject:
		return d.settleApproval(ctx, req, ActionKind(kind), arg)
	case ActCancel:
		id, err := strconv.ParseInt(arg, 10, 64)
		if err == nil && id > 0 {
			return d.cancelJob(ctx, req, "cancel "+arg, id)
		}
	}
	d.audit(ctx, req, a.ID, store.DecisionInvalid, "unknown action", 0)
	return Reply{Outcome: Invalid, Text: "unknown action: the message it came from is out of date", Err: errors.New("unknown action")}
}

// tooManyWrong is the refusal of a user (key) whose wrong tokens of what
// ("confirmations", "approvals") are limited until a time after now.
func (d *Dispatcher) tooManyWrong(key string, now time.Time, what string) (Reply, bool) {
	d.mu.Lock()
	until, limited := d.limited(key, now)
	d.mu.Unlock()
	if !limited {
		return Reply{}, false
	}
	return Reply{Outcome: Refused, Text: fmt.Sprintf("too many wrong %s: wait until %s, then try again.", what, report.Clock(until)),
		Err: errors.New(what + " rate-limited")}, true
}

// settle confirms or aborts the confirmation waiting under token. The
// role is checked before ownership: a user without any role who settles
// someone else's confirmation learns nothing of who asked or for what.
func (d *Dispatcher) settle(ctx context.Context, req Request, kind ActionKind, token string) Reply {
	key := req.Platform + ":" + req.User
	now := d.opts.Now()
	if r, limited := d.tooManyWrong(key, now, "confirmations"); limited {
		return r
	}
	c, err := d.opts.Store.Confirmation(ctx, token)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		d.log.Error("read a confirmation", "err", err)
		return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
	}
	if err != nil || c.Room != req.Room || c.Platform != req.Platform {
		return d.unknownConfirmation(ctx, req, kind, now)
	}
	cmd, perr := commands.Parse(c.Command, d.commands())
	expired := now.After(c.Expires)
	var ended *store.Incident // the closed incident whose offer this was
	if c.Incident != 0 {
		in, err := d.opts.Store.Incident(ctx, c.Incident)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			d.log.Error("read the incident of a confirmation", "incident", c.Incident, "err", err)
			return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
		}
		expired = err != nil || !in.Open()
		if err == nil && !in.Open() {
			ended = &in
		}
	}
	if expired || perr != nil {
		if _, err := d.opts.Store.TakeConfirmation(ctx, token); err != nil {
			d.log.Warn("drop a confirmation", "err", err)
		}
		if ended != nil {
			d.audit(ctx, req, c.Command, store.DecisionExpired, fmt.Sprintf("incident #%d closed", ended.ID), 0)
			return Reply{Outcome: Invalid, Text: fmt.Sprintf("incident #%d closed at %s, and its offer of `%s` with it: %s is well again (`svc status %s` shows it now); nothing was changed.",
				ended.ID, report.Stamp(ended.ClosedAt), c.Command, ended.Service, ended.Service), Command: cmd, Err: errors.New("incident closed")}
		}
		if perr != nil {
			d.audit(ctx, req, c.Command, store.DecisionInvalid, "confirmed command no longer valid: "+perr.Error(), 0)
			return Reply{Outcome: Invalid, Text: fmt.Sprintf("`%s` is no longer valid with opsbot's current config (%v); nothing was changed.",
				c.Command, perr), Err: perr}
		}
		d.audit(ctx, req, c.Command, store.DecisionExpired, "confirmation expired", 0)
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("that confirmation expired; run `%s` again.", c.Command),
			Command: cmd, Err: errors.New("confirmation expired")}
	}
	mine := c.Proposed || c.User == req.User
	if have := d.opts.Auth.RoleIn(req.Platform, req.Room, req.User); !mine && have == auth.RoleNone {
		msg := fmt.Sprintf("you have no role in opsbot here, so you cannot %s this; nothing was changed. "+
			"Ask an admin to grant one in the config (auth.users[\"%s:%s\"]).", kind, req.Platform, req.User)
		if d.wrongAttempt(key, now) {
			d.audit(ctx, req, c.Command, store.DecisionRefused, "no role", 0)
		}
		return Reply{Outcome: Refused, Refusal: RefusedRole, Text: msg, Err: &RefusedError{Need: commands.RoleOf(cmd), Have: have}}
	}
	if !mine {
		msg := fmt.Sprintf("only %s, who asked for `%s`, may %s it; nothing was changed. To do it yourself, run `%s`.",
			userLabel(Request{User: c.User, UserName: c.UserName}), c.Command, kind, c.Command)
		if d.wrongAttempt(key, now) {
			d.audit(ctx, req, c.Command, store.DecisionRefused, msg, 0)
		}
		return Reply{Outcome: Refused, Text: msg, Command: cmd, Err: errors.New(msg)}
	}
	if p := d.opts.Auth.Permit(req.Platform, req.Room, req.User, cmd); !p.OK {
		return d.refuseRole(ctx, req, cmd, p)
	}
	taken, err := d.opts.Store.TakeConfirmation(ctx, token)
	if err != nil {
		d.log.Error("take a confirmation", "err", err)
		return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
	}
	if !taken { // settled a moment ago, by another click or another process
		return Reply{Outcome: Invalid, Text: "that confirmation was just used: nothing more was done.",
			Command: cmd, Err: errors.New("confirmation already used")}
	}
	if kind == ActAbort {
		d.audit(ctx, req, commands.Text(cmd), "aborted", "", 0)
		aud := ToUser
		if c.Proposed {
			aud = ToRoom
		}
		return Reply{Outcome: Answered, Text: fmt.Sprintf("`%s` aborted: nothing was changed.", commands.Text(cmd)), Audience: aud, Command: cmd}
	}
	run := Request{Platform: c.Platform, User: c.User, UserName: c.UserName, Room: c.Room, Via: c.Via, ReplyTo: c.ReplyTo}
	if c.Proposed {
		run = req // the job is the confirmer's
	}
	run.Confirmed = true
	if d.opts.Auth.Scope().NeedsApproval(cmd) {
		return d.askApproval(ctx, run, cmd, key)
	}
	return d.start(ctx, run, cmd, "confirmed by "+key)
}

// unknownConfirmation answers an attempt on a token that waits nowhere here.
func (d *Dispatcher) unknownConfirmation(ctx context.Context, req Request, kind ActionKind, now time.Time) Reply {
	if d.wrongAttempt(req.Platform+":"+req.User, now) {
		d.audit(ctx, req, string(kind)+" (token withheld)", store.DecisionInvalid, fmt.Sprintf(
			"no confirmation waits under that token here; further wrong attempts within %s are counted, not audited, and %d lock them out until then",
			d.opts.WrongWindow, d.opts.WrongLimit), 0)
	}
	return Reply{Outcome: Invalid, Text: "nothing waits for that confirmation here: it was used, expired or never asked. Run the command again.",
		Err: errors.New("unknown confirmation")}
}

// Previewed records that the platform message id shows the preview of the
// confirmation asked under token: a reaction to that message settles it.
// For an approval's request (NeedsApproval) it records that message the
// same way: a reaction to it approves or rejects.
func (d *Dispatcher) Previewed(ctx context.Context, token, messageID string) error {
	err := d.opts.Store.SetConfirmationMessage(ctx, token, messageID)
	if errors.Is(err, store.ErrNotFound) {
		return d.opts.Store.SetApprovalMessage(ctx, token, messageID)
	}
	return err
}

// wrongAttempt counts a wrong confirmation attempt of key and reports whether
// it is the first of its burst (the one that is audited).
func (d *Dispatcher) wrongAttempt(key string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.wrong) > 4*d.opts.MaxPending {
		for k, b := range d.wrong {
			if now.Sub(b.start) >= d.opts.WrongWindow {
				delete(d.wrong, k)
			}
		}
	}
	b := d.wrong[key]
	if b == nil || now.Sub(b.start) >= d.opts.WrongWindow {
		b = &wrongBurst{start: now}
		d.wrong[key] = b
	}
	b.n++
	if b.n == d.opts.WrongLimit {
		d.log.Warn("confirmations locked out after wrong attempts", "user", key, "attempts", b.n, "until", b.start.Add(d.opts.WrongWindow))
	}
	return b.n == 1
}

// limited reports whether key made too many wrong attempts in its burst, and
// until when it is refused. d.mu is held.
func (d *Dispatcher) limited(key string, now time.Time) (time.Time, bool) {
	b := d.wrong[key]
	if b == nil || now.Sub(b.start) >= d.opts.WrongWindow || b.n < d.opts.WrongLimit {
		return time.Time{}, false
	}
	return b.start.Add(d.opts.WrongWindow), true
}

func newToken() string {
	var b [TokenBytes]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Preview says in one line what a command that needs confirmation will do.
func Preview(cmd commands.Command) string { return commands.PreviewOf(cmd) }

// cancelJob stops job id for req: the job's own user or an admin only.
func (d *Dispatcher) cancelJob(ctx context.Context, req Request, text string, id int64) Reply {
	j, err := d.opts.Store.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("there is no job #%d (`jobs` lists them)", id), Err: err}
	}
	if err != nil {
		return Reply{Outcome: Failed, Text: fmt.Sprintf("could not read job #%d: %v", id, err), Err: err}
	}
	if j.Status.Final() {
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("job #%d already %s", j.ID, j.Status), Err: errors.New("job already final")}
	}
	need := commands.Lookup("cancel").Role
	isOwner := jobs.JobOwner(j) == req.Platform+":"+req.User
	isAdmin := d.opts.Auth.RoleOn(req.Platform, req.Room, req.User, j.Service) == commands.Admin
	if have := d.opts.Auth.RoleOn(req.Platform, req.Room, req.User, j.Service); have == auth.RoleNone || have < need || (!isOwner && !isAdmin) {
		msg := fmt.Sprintf("only %s, who started #%d, or an admin may cancel it.", jobs.JobOwner(j), j.ID)
		d.audit(ctx, req, text, store.DecisionRefused, msg, j.ID)
		return Reply{Outcome: Refused, Text: msg, JobID: j.ID, Err: errors.New(msg)}
	}
	elsewhere, err := d.opts.Engine.Cancel(ctx, j.ID)
	if err != nil {
		return Reply{Outcome: Failed, Text: fmt.Sprintf("could not cancel #%d: %v", j.ID, err), JobID: j.ID, Err: err}
	}
	d.audit(ctx, req, text, store.DecisionCancelled, j.Command, j.ID)
	where := ""
	if elsewhere != "" {
		where = " (running in another opsbot process on " + elsewhere + ")"
	}
	return Reply{Outcome: Answered, Text: fmt.Sprintf("cancelling #%d `%s`%s: it stops at the next safe point", j.ID, j.Command, where),
		Audience: ToRoom, JobID: j.ID}
}

func (d *Dispatcher) start(ctx context.Context, req Request, cmd commands.Command, decision string) Reply {
	if answer := answerFor(cmd); answer != nil {
		r := answer(ctx, d, req)
		r.Command = cmd
		d.audit(ctx, req, commands.Text(cmd), decision, "answered", r.JobID)
		return r
	}
	// The job row and the audit entry that accepted it commit together, in one
	// write batched with the other requests of the moment.
	job, err := d.opts.Store.CreateJobAudited(ctx, jobOf(cmd, store.Job{Platform: req.Platform, User: req.User,
		Room: req.Room, Status: store.Queued, ScheduleID: scheduleID(req)}),
		store.AuditEntry{At: d.opts.Now(), Platform: req.Platform, User: req.User, Room: req.Room,
			Command: commands.Text(cmd), Decision: decision, Detail: d.detail(req, "job queued")})
	if err != nil {
		d.log.Error("create job", "command", commands.Text(cmd), "err", err)
		if store.IsRefusingWrites(err) {
			return Reply{Outcome: Failed, Text: StoreDownText, Command: cmd, Err: err}
		}
		return Reply{Outcome: Failed, Text: "could not record the job, nothing was started: " + err.Error(), Command: cmd, Err: err}
	}
	noteCommitted(ctx, job.ID)
	if err := d.opts.Engine.Submit(jobs.Submission{Job: job, Cmd: cmd, ReplyTo: req.ReplyTo, UserName: userLabel(req)}); err != nil {
		_ = d.opts.Store.FinishJob(context.WithoutCancel(ctx), job.ID, store.Cancelled, err.Error(), nil)
		return Reply{Outcome: Failed, Text: "not started: " + err.Error(), JobID: job.ID, Command: cmd, Err: err}
	}
	return Reply{Outcome: Queued, Text: fmt.Sprintf("#%d queued: `%s`", job.ID, commands.Text(cmd)), JobID: job.ID, Command: cmd,
		Actions: []Action{{ID: fmt.Sprintf("%s:%d", ActCancel, job.ID), Kind: ActCancel, Label: "Cancel"}}}
}

func userLabel(req Request) string {
	if req.UserName != "" {
		return req.UserName
	}
	return req.User
}

// detail prefixes an audit detail with who acted for whom, when someone acts
// as another user ("console:root as console:alice").
func (d *Dispatcher) detail(req Request, detail string) string {
	if req.Via == "" || req.Via == req.User {
		return detail
	}
	who := fmt.Sprintf("%s:%s as %s:%s", req.Platform, req.Via, req.Platform, req.User)
	if detail == "" {
		return who
	}
	return who + "; " + detail
}

func (d *Dispatcher) audit(ctx context.Context, req Request, command, decision, detail string, jobID int64) {
	err := d.opts.Store.AppendAudit(context.WithoutCancel(ctx), store.AuditEntry{At: d.opts.Now(), Platform: req.Platform,
		User: req.User, Room: req.Room, Command: command, Decision: decision, Detail: d.detail(req, detail), JobID: jobID})
	if err != nil {
		d.log.Error("append audit", "err", err)
	}
}

// Parse parses text as Handle would, without acting: for callers that validate
// a batch of commands before running any.
func (d *Dispatcher) Parse(text string) (commands.Command, error) {
	if _, ok := confirmToken(strings.TrimSpace(text)); ok && len(text) <= commands.MaxInputLen {
		return nil, errors.New("confirm only answers a question the bot asked")
	}
	if w, ok := yesWord(text); ok {
		return nil, fmt.Errorf("%s only answers a question the bot asked", w)
	}
	if k, _, ok := approvalWord(strings.TrimSpace(text)); ok {
		return nil, fmt.Errorf("%s only answers a request for approval", k)
	}
	return commands.Parse(text, d.commands())
}
