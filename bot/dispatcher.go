package bot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/store"
)

// Request is one chat command as an adapter received it, already verified
// (signature, room, sender) and deduplicated by the adapter.
type Request struct {
	Platform string // "slack", "matrix", "console", "schedule"
	User     string // the platform's stable user id
	UserName string // display name, for rendering only; never for auth
	Room     string // channel / room id where the answer goes
	Text     string // the command text, e.g. "/mtp steps 10"
	ReplyTo  string // platform message to answer, if any
	// Confirmed pre-answers a confirmation (the console's --yes, a scheduled
	// run of a command its creator confirmed).
	Confirmed  bool
	ScheduleID int64
}

// Outcome is what became of a request.
type Outcome string

// Outcomes of Handle.
const (
	Queued       Outcome = "queued"        // a job was created; Reply.JobID names it
	Answered     Outcome = "answered"      // answered at once (help, jobs, history, ...)
	NeedsConfirm Outcome = "needs_confirm" // Reply.Token must be confirmed
	Invalid      Outcome = "invalid"       // usage error; nothing started
	Refused      Outcome = "refused"       // not allowed; nothing started
	Failed       Outcome = "failed"        // could not be started (store down, ...)
)

// Reply is the immediate answer to a request (the ack). The job's progress
// follows in its status thread.
type Reply struct {
	Outcome Outcome
	Text    string
	JobID   int64
	Command *commands.Command
	Token   string // confirmation token for NeedsConfirm
	Err     error
}

// DispatcherOptions configure a Dispatcher.
type DispatcherOptions struct {
	Store    *store.Store
	Engine   *Engine
	Auth     *Auth
	Commands commands.Options
	// ConfirmTTL is how long a confirmation stays valid (default 2 minutes).
	ConfirmTTL time.Duration
	Logger     *slog.Logger
	// Answer handles commands answered at once (help, jobs, history, cancel,
	// schedule ...). Nil uses the built-in answers.
	Now func() time.Time
}

// Dispatcher turns requests into jobs: parse, authorise, confirm, record,
// submit. It is the only place those decisions are made. Safe for concurrent use.
type Dispatcher struct {
	opts DispatcherOptions
	log  *slog.Logger

	mu      sync.Mutex
	pending map[string]*pendingConfirm
}

type pendingConfirm struct {
	req     Request
	cmd     *commands.Command
	expires time.Time
}

// NewDispatcher returns a dispatcher.
func NewDispatcher(opts DispatcherOptions) *Dispatcher {
	if opts.ConfirmTTL <= 0 {
		opts.ConfirmTTL = 2 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Dispatcher{opts: opts, log: log, pending: map[string]*pendingConfirm{}}
}

// Handle answers one request within milliseconds: a job is queued and runs in
// the background, or the request is answered, refused or rejected at once.
// Nothing is started unless the whole command parsed and was authorised.
func (d *Dispatcher) Handle(ctx context.Context, req Request) Reply {
	text := strings.TrimSpace(req.Text)
	if tok, ok := confirmToken(text); ok && len(req.Text) <= commands.MaxInputLen {
		return d.Confirm(ctx, req, tok)
	}
	// The length limit applies to the text as typed: Parse trims it itself.
	cmd, err := commands.Parse(req.Text, d.opts.Commands)
	if err != nil {
		d.audit(ctx, req, text, "invalid", err.Error())
		return Reply{Outcome: Invalid, Text: err.Error(), Err: err}
	}
	if !d.opts.Auth.Allowed(req.Platform, req.User, cmd.Role()) {
		return d.refuse(ctx, req, cmd)
	}
	if cmd.Spec.Confirm && !cmd.DryRun && !req.Confirmed {
		return d.askConfirm(ctx, req, cmd)
	}
	return d.start(ctx, req, cmd, "accepted")
}

func confirmToken(text string) (string, bool) {
	text = strings.TrimLeft(text, "/!")
	f := strings.Fields(text)
	if len(f) == 2 && strings.EqualFold(f[0], "confirm") {
		return strings.ToLower(f[1]), true
	}
	return "", false
}

func (d *Dispatcher) refuse(ctx context.Context, req Request, cmd *commands.Command) Reply {
	have := d.opts.Auth.Role(req.Platform, req.User)
	msg := fmt.Sprintf("`%s` needs the %s role; you have %s. Ask an admin to grant it in the config (auth.users[\"%s:%s\"]).",
		cmd.Text, cmd.Role(), roleName(have), req.Platform, req.User)
	d.audit(ctx, req, cmd.Text, "refused", msg)
	job, err := d.opts.Store.CreateJob(ctx, store.Job{Command: cmd.Text, Platform: req.Platform, User: req.User,
		Room: req.Room, Service: cmd.Service, Host: cmd.Host, Status: store.Refused, Error: msg, ScheduleID: req.ScheduleID})
	if err != nil {
		d.log.Error("record refused job", "err", err)
	}
	return Reply{Outcome: Refused, Text: msg, JobID: job.ID, Command: cmd, Err: &RefusedError{Need: cmd.Role(), Have: have}}
}

// RefusedError says a user lacks the role a command needs.
type RefusedError struct{ Need, Have commands.Role }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("needs role %s, have %s", e.Need, roleName(e.Have))
}

func (d *Dispatcher) askConfirm(ctx context.Context, req Request, cmd *commands.Command) Reply {
	tok := newToken()
	d.mu.Lock()
	now := d.opts.Now()
	for k, p := range d.pending {
		if now.After(p.expires) {
			delete(d.pending, k)
		}
	}
	d.pending[tok] = &pendingConfirm{req: req, cmd: cmd, expires: now.Add(d.opts.ConfirmTTL)}
	d.mu.Unlock()
	text := fmt.Sprintf("%s\nReply `confirm %s` within %s to go ahead, or run it with --dry-run to see the plan.",
		Preview(cmd), tok, d.opts.ConfirmTTL)
	d.audit(ctx, req, cmd.Text, "confirm_asked", tok)
	return Reply{Outcome: NeedsConfirm, Text: text, Command: cmd, Token: tok}
}

// Confirm runs the command waiting under token. The confirmer is authorised
// again, for the command's role, at this moment; the token works once, in the
// room it was asked in, until it expires.
func (d *Dispatcher) Confirm(ctx context.Context, req Request, token string) Reply {
	d.mu.Lock()
	p, ok := d.pending[token]
	if ok && p.req.Room == req.Room && p.req.Platform == req.Platform {
		delete(d.pending, token)
	} else {
		ok = false
	}
	d.mu.Unlock()
	if !ok {
		d.audit(ctx, req, "confirm "+token, "invalid", "unknown token")
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("nothing waits for confirmation %q here: it was used, expired or never asked. Run the command again.", token),
			Err: errors.New("unknown confirmation")}
	}
	if d.opts.Now().After(p.expires) {
		d.audit(ctx, req, p.cmd.Text, "invalid", "confirmation expired")
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("confirmation %s expired; run `%s` again.", token, p.cmd.Text),
			Err: errors.New("confirmation expired")}
	}
	if !d.opts.Auth.Allowed(req.Platform, req.User, p.cmd.Role()) {
		return d.refuse(ctx, req, p.cmd)
	}
	orig := p.req
	orig.Confirmed = true
	r := d.start(ctx, orig, p.cmd, "confirmed by "+req.Platform+":"+req.User)
	return r
}

func newToken() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Preview says in one line what a command that needs confirmation will do.
func Preview(cmd *commands.Command) string {
	switch cmd.Spec.Path {
	case "gpu recover":
		s := fmt.Sprintf("`%s` will stop %s on %s, SIGTERM then SIGKILL the engine processes holding its GPU memory", cmd.Text, cmd.Service, cmd.Host)
		if cmd.Force {
			s += " (with --force: also non-engine holders, never the NVIDIA daemons)"
		}
		if cmd.NoStart {
			return s + ", and leave it stopped."
		}
		return s + ", then start it fresh and wait until it serves."
	case "svc stop":
		return fmt.Sprintf("`%s` will stop %s on %s: it stops serving until started again.", cmd.Text, cmd.Service, cmd.Host)
	default:
		return fmt.Sprintf("`%s` changes %s.", cmd.Text, cmd.Host)
	}
}

func (d *Dispatcher) start(ctx context.Context, req Request, cmd *commands.Command, decision string) Reply {
	if ans, ok := d.answer(ctx, req, cmd); ok {
		d.audit(ctx, req, cmd.Text, decision, "answered")
		return ans
	}
	// The job row and the audit entry that accepted it commit together, in one
	// write batched with the other requests of the moment.
	job, err := d.opts.Store.CreateJobAudited(ctx, store.Job{Command: cmd.Text, Platform: req.Platform, User: req.User,
		Room: req.Room, Service: cmd.Service, Host: cmd.Host, Status: store.Queued, ScheduleID: req.ScheduleID},
		store.AuditEntry{At: d.opts.Now(), Platform: req.Platform, User: req.User, Room: req.Room,
			Command: cmd.Text, Decision: decision, Detail: "job queued"})
	if err != nil {
		d.log.Error("create job", "command", cmd.Text, "err", err)
		return Reply{Outcome: Failed, Text: "could not record the job, nothing was started: " + err.Error(), Command: cmd, Err: err}
	}
	if err := d.opts.Engine.Submit(Submission{Job: job, Cmd: cmd, ReplyTo: req.ReplyTo, UserName: userLabel(req)}); err != nil {
		_ = d.opts.Store.FinishJob(context.WithoutCancel(ctx), job.ID, store.Cancelled, err.Error(), nil)
		return Reply{Outcome: Failed, Text: "not started: " + err.Error(), JobID: job.ID, Command: cmd, Err: err}
	}
	return Reply{Outcome: Queued, Text: fmt.Sprintf("#%d queued: `%s`", job.ID, cmd.Text), JobID: job.ID, Command: cmd}
}

func userLabel(req Request) string {
	if req.UserName != "" {
		return req.UserName
	}
	return req.User
}

func (d *Dispatcher) audit(ctx context.Context, req Request, command, decision, detail string) {
	err := d.opts.Store.AppendAudit(context.WithoutCancel(ctx), store.AuditEntry{At: d.opts.Now(), Platform: req.Platform,
		User: req.User, Room: req.Room, Command: command, Decision: decision, Detail: detail})
	if err != nil {
		d.log.Error("append audit", "err", err)
	}
}

// Parse parses text as Handle would, without acting: for callers that validate
// a batch of commands before running any.
func (d *Dispatcher) Parse(text string) (*commands.Command, error) {
	if _, ok := confirmToken(strings.TrimSpace(text)); ok && len(text) <= commands.MaxInputLen {
		return nil, errors.New("confirm only answers a question the bot asked")
	}
	return commands.Parse(text, d.opts.Commands)
}
