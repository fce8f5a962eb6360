package bot

import (
	"context"
	"time"

	"github.com/opsbot/opsbot/commands"
)

// Inbound is the one door every chat comes in through: adapters (Slack,
// Matrix, the console, the scheduler) depend on this contract only. A request
// goes in, a typed Reply comes out; a Reply may offer actions whose ids the
// adapter sends back through Act with the user who clicked them, who is
// authorised again then. The Dispatcher implements it.
type Inbound interface {
	// Handle answers one request at once: a job queued, an answer, a
	// confirmation asked, a refusal or a usage error. It never blocks on a job.
	Handle(ctx context.Context, req Request) Reply
	// Act performs an action a Reply offered (Confirm, Abort, Cancel) for the
	// user who clicked it, under the rules of that action.
	Act(ctx context.Context, a ActionRequest) Reply
	// Previewed records that the platform message messageID shows the
	// preview of the confirmation asked under token (Reply.Token): a
	// reaction to that message (ActionRequest.Message) settles it.
	Previewed(ctx context.Context, token, messageID string) error
}

var _ Inbound = (*Dispatcher)(nil)

// Request is one chat command as an adapter received it, authenticated by
// the platform's own checks (a signature, the homeserver session). The door
// decides everything else: the delivery's claim, the room, the age, the role.
type Request struct {
	Platform string // "slack", "matrix", "console", "schedule"
	User     string // the platform's stable user id
	UserName string // display name, for rendering only; never for auth
	Room     string // channel / room id where the answer goes
	Text     string // the command text, e.g. "/mtp steps 10"
	ReplyTo  string // platform message to answer, if any
	// Via is the user who acts as User when they differ (a terminal's OS
	// user running `opsbot run --as ID`): the request is refused unless Via
	// holds the admin role on Platform, and the audit names both.
	Via string
	// Confirmed pre-answers a confirmation: a terminal's --yes, where the one
	// who types the command is the one who confirms it.
	Confirmed bool
	// Schedule is set on requests of platform "schedule" and only there.
	Schedule *ScheduleRun
	// Delivery identifies this delivery on its platform: a Slack HTTP
	// delivery's key (from its signed timestamp and body), an Events API
	// event id (the same on Slack's retries), a Socket Mode envelope id, a
	// Matrix event id. The door claims it in the store, so a delivery seen
	// before, by this process or another on the store, runs nothing ("" is
	// never a duplicate: a terminal, a schedule).
	Delivery string
	// SentAt is when the platform says the command was sent (zero: unknown);
	// the platform's Admission.StaleAfter applies to it.
	SentAt time.Time
	// DM is set when the command came in a direct message with the bot.
	DM bool
	// Unreadable, when set, says why the adapter could not read the
	// delivery's text (an encrypted message whose room key it lacks, or
	// one it cannot decrypt at all); Text then names what it was
	// ("(encrypted)"). The door claims and admits it as any other delivery,
	// audits it (DecisionUndecryptable) and answers Refused with
	// RefusedUnreadable: nothing runs, whatever its age. The adapter tells
	// the sender in its own words.
	Unreadable string
	// Invite is set when the delivery is an invitation of the bot to Room
	// (Text "(invite)"), not a command: the door answers Answered when the
	// bot may join Room, else Refused with RefusedRoom, audited
	// (DecisionIgnored); the adapter then joins or declines.
	Invite bool
	// Watchdog is set on requests of platform "watchdog" and only there.
	Watchdog *WatchdogRun
}

// PlatformSchedule is the platform of scheduled runs.
const PlatformSchedule = "schedule"

// PlatformWatchdog is the platform of the runs the watchdog starts itself
// (services.X.auto_recover): the watchdog is a principal of its own at the
// door, as the scheduler is (PlatformSchedule).
const PlatformWatchdog = "watchdog"

// WatchdogRun is what a run the watchdog starts itself carries through the
// door: `gpu recover` of the service of an open incident, which the
// watchdog asks for only while the config in effect sets
// services.X.auto_recover. The door runs it without asking anyone, as user
// "opsbot", its thread in the first of To, audited with the incident; it
// refuses any other command (Invalid, audited).
type WatchdogRun struct {
	Incident int64
	Service  string
	// To are the watchdog's rooms (watchdog.to), first one first.
	To []Target
}

// ScheduleRun is what a scheduled run carries through the door. The command
// runs with the role its creator holds at run time, without asking again (the
// creator confirmed it when adding the schedule), and reports to the target
// rooms.
type ScheduleRun struct {
	ID int64
	// Creator is the auth key of who added the schedule: "slack:U123".
	Creator string
	// To are the rooms the run reports to, first one first: its job's status
	// thread is posted there.
	To []Target
}

// Target is one room on one platform.
type Target struct{ Platform, Room string }

// Outcome is what became of a request.
type Outcome string

// Outcomes of Handle and Act.
const (
	Queued       Outcome = "queued"        // a job was created; Reply.JobID names it
	Answered     Outcome = "answered"      // answered at once (help, jobs, history, ...)
	NeedsConfirm Outcome = "needs_confirm" // Reply.Actions offer Confirm and Abort
	// NeedsApproval: the command waits for a second person (auth.two_person);
	// Reply.Actions offer Approve and Reject, Reply.Token is for `approve TOKEN`.
	NeedsApproval Outcome = "needs_approval"
	Invalid       Outcome = "invalid"   // usage error; nothing started
	Refused       Outcome = "refused"   // not allowed; nothing started (Reply.Refusal says why)
	Failed        Outcome = "failed"    // could not be started (store down, ...)
	Duplicate     Outcome = "duplicate" // the delivery was handled before; nothing ran again
	Ignored       Outcome = "ignored"   // nothing to act on (a reaction to a message that asks nothing); show nothing
	// InternalError: handling the request panicked; nothing was changed
	// unless Reply.JobID names the job it recorded.
	InternalError Outcome = "internal_error"
)

// Audience says who a Reply is for.
type Audience int

const (
	// ToUser is for the requester only (an ephemeral message where the
	// platform has them): usage errors, refusals, previews, acknowledgements.
	ToUser Audience = iota
	// ToRoom is for everyone in the room: answers and the bot's own proposals.
	ToRoom
)

// ActionRequest is a click on an Action, with who clicked it and where.
//
// A reaction to a preview (Matrix) carries the action's kind as ID
// ("confirm", "abort") and the message reacted to as Message: the door
// finds the confirmation that message shows.
type ActionRequest struct {
	ID       string
	Platform string
	User     string
	UserName string
	Room     string
	Via      string // as in Request
	Message  string // the platform message acted on, for reactions
	Delivery string // as in Request
	DM       bool   // as in Request
}

// Reply is the immediate answer to a request or an action. The job's
// progress follows in its status thread.
type Reply struct {
	Outcome Outcome
	// Text is what to show, rendered once here for every platform.
	Text     string
	Audience Audience
	Actions  []Action
	JobID    int64
	Command  commands.Command
	// Token is the confirmation token of NeedsConfirm, for text-only chats
	// where the user types `confirm TOKEN` (the Confirm action's id carries it too).
	Token string
	// Preview is NeedsConfirm's preview alone: what confirming agrees to,
	// without the chat's instructions of how to confirm.
	Preview string
	// Rooms are where a scheduled run's reply goes (its ScheduleRun.To).
	Rooms []Target
	// Refusal says why a Refused reply was refused at the door.
	Refusal Refusal
	// Job is the job an answer is about (`job N`), with its steps and
	// result, as data for adapters that print it so (the terminal's --json).
	Job *JobOutcome
	// Jobs are the jobs an answer lists (`jobs`), newest first, without
	// their steps and results; non-nil, if empty, for such an answer.
	// Omitted is how many it left out (it lists the newest JobsListed).
	Jobs    []JobOutcome
	Omitted int
	// Fleet is `fleet`'s answer as data, for adapters that print it so
	// (the terminal's --json); nil for any other reply.
	Fleet *Fleet
	Err   error
}

// Action returns the reply's action of kind k, if it offers one.
func (r Reply) Action(k ActionKind) (Action, bool) {
	for _, a := range r.Actions {
		if a.Kind == k {
			return a, true
		}
	}
	return Action{}, false
}
