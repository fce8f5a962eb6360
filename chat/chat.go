// Package chat is the vocabulary between opsbot and a chat platform: the
// Chat an adapter implements (Post, Edit, Reply), the adapter-neutral
// Message it is given (its Kind, its Status, an Image, the Actions it
// offers) and the Ref that names a posted message, plus the Pacer a
// rate-limited chat implements. It imports nothing of opsbot: the door
// (bot), the job runtime (jobs) and the rendering (report) speak it.
package chat

import (
	"context"
	"time"
)

// Ref names a message a Chat posted, so it can be edited or replied to.
type Ref struct {
	Room string
	ID   string
}

// Kind says what a message is, so an adapter can style it.
type Kind int

// Message kinds.
const (
	KindStatus Kind = iota // the root status message of a job, edited in place
	KindStep               // step lines in the job's thread
	KindResult             // the final result block, in the thread
	KindNotice             // a one-off notice (usage error, refusal, interrupted job)
)

// Image is a PNG attachment (sweep charts).
type Image struct {
	Name string
	PNG  []byte
}

// Status is what a status message says of its job (or alert), typed so
// that an adapter maps it to its own reaction or icon without reading the
// text.
type Status string

// Statuses of a status message: a job's states, and Waiting (queued behind
// another job's lock), for display only.
const (
	StatusQueued      Status = "queued"
	StatusWaiting     Status = "waiting"
	StatusRunning     Status = "running"
	StatusSucceeded   Status = "succeeded"
	StatusFailed      Status = "failed"
	StatusRefused     Status = "refused"
	StatusCancelled   Status = "cancelled"
	StatusInterrupted Status = "interrupted"
)

// Final reports whether s is an end state.
func (s Status) Final() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusRefused, StatusCancelled, StatusInterrupted:
		return true
	}
	return false
}

// Icon is the emoji status messages begin with.
func (s Status) Icon() string {
	switch s {
	case StatusQueued:
		return "⏳"
	case StatusWaiting:
		return "⏸️"
	case StatusRunning:
		return "🔄"
	case StatusSucceeded:
		return "✅"
	case StatusFailed:
		return "❌"
	case StatusCancelled:
		return "🚫"
	case StatusRefused:
		return "⛔"
	case StatusInterrupted:
		return "⚠️"
	}
	return ""
}

// Message is adapter-neutral: plain text with light markup (`code`, *bold*,
// and preformatted blocks made by Pre: journal lines, tables, diffs) that
// every platform renders acceptably, plus an optional image. A chat shows a
// block as a code block; a terminal prints it without its fences (Plain).
type Message struct {
	Kind  Kind
	Text  string
	Image *Image
	// Final is set on the last edit of a job's status message.
	Final bool
	// Status is what a KindStatus message says of its job or alert ("" for
	// other kinds).
	Status Status
	// Replaces, on a final status edit, is the outcome an earlier final
	// edit of the same message may show ("" for none): a job recorded late
	// replaces the interruption another opsbot process showed. The adapter
	// takes that outcome's reaction away, so that the message shows one
	// outcome, Status's.
	Replaces Status
	// ReplyTo is the platform message this one answers (a Matrix event id, a
	// Slack thread ts), when the request had one.
	ReplyTo string
	// Actions are buttons the message offers (the watchdog's Recover: a
	// proposal's Confirm and Abort). A chat with buttons shows them and sends
	// a click to Inbound.Act; the text always says the `confirm TOKEN` to type.
	Actions []Action
}

// Chat is what the bot needs from a chat platform. Implementations must be safe
// for concurrent use; calls may block on the network and honour ctx.
type Chat interface {
	// Post sends a new root message to room.
	Post(ctx context.Context, room string, m Message) (Ref, error)
	// Edit replaces the text of a message posted earlier.
	Edit(ctx context.Context, ref Ref, m Message) error
	// Reply posts m in the thread under ref.
	Reply(ctx context.Context, ref Ref, m Message) (Ref, error)
}

// Pacer is implemented by chats with rate limits: the bot coalesces status
// edits and step lines so that it sends at most one update per EditInterval.
type Pacer interface {
	EditInterval() time.Duration
}

// ActionKind is what an action does.
type ActionKind string

// Action kinds.
const (
	ActConfirm ActionKind = "confirm" // run the previewed command
	ActAbort   ActionKind = "abort"   // drop the previewed command
	ActCancel  ActionKind = "cancel"  // stop a queued or running job
	ActApprove ActionKind = "approve" // approve a command that waits for a second person
	ActReject  ActionKind = "reject"  // drop a command that waits for a second person
)

// Action is a button a Reply offers. The adapter shows Label and sends ID
// back in an ActionRequest; the action is gone after Expires (zero: until the
// job ends).
type Action struct {
	ID      string
	Kind    ActionKind
	Label   string
	Expires time.Time
}
