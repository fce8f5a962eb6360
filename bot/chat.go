// Package bot is the application: the dispatcher that turns chat text into
// authorised jobs, confirmations, the job engine (queue, per-service locks held
// as leases in the store across opsbot processes, cancel, timeouts, crash
// recovery) and the rendering of a job as one live status message with a
// thread of steps.
//
// Chat adapters (bot/slack, bot/matrix, bot/console) only translate between a
// platform and this package, through one small contract, Inbound: a Request
// in, a typed Reply out that says what to show, to whom (ToUser or ToRoom) and
// which actions it offers (Confirm / Abort on a preview, Cancel on a job);
// the adapter sends a clicked action back to Act with the clicking user, who
// is authorised again, in the room where they click. An adapter that knows
// more about a user supplies it through a small interface Auth reads
// (Membership: user groups; RoomLevels: power levels in a room). Every
// decision is made here, once, so all platforms behave the same. Scheduled
// runs come through the same door as platform "schedule", with their
// creator's role and their target rooms.
//
// As a service (`opsbot serve`), the App hosts Adapters, drains (Dispatcher.Drain:
// every request is answered RestartingText), shuts down stopping each job at
// a safe point (never inside a unit write or a start; what is stopped ends
// interrupted), reloads roles and services (App.Reload) and tells an
// Observer of every job and step for metrics.
//
// The Scheduler (scheduler.go) fires the store's and the config's schedules
// through that door, once per firing across the processes on a store, on the
// holder of the "scheduler" lease; the Watchdog (watchdog.go) watches every
// service on the holder of the "watchdog" lease and keeps one alert per
// incident, edited as it evolves. `opsbot serve` starts both.
//
// Each command of the registry is bound to its handler by its Spec (the
// handlers table; job commands run the pipeline ops binds to the same Spec),
// and results cross layers as Go types (ops.Result).
//
// A sweep's or tune's result is reported as a table per concurrency, each
// point beside its previous result, and a PNG chart attached to the thread
// (SweepTables, SweepChart, named ChartName). CheckRegression judges a
// finished job's benchmarks, each setting in each concurrency bucket, by
// output tok/s and accept length against the median of their last
// comparable runs and returns the alert to post; it posts nothing itself.
package bot

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
