package bot

import (
	"context"
	"errors"
	"net/http"

	"github.com/opsbot/opsbot/auth"
	"github.com/opsbot/opsbot/leases"
)

// Adapter is a chat platform as `opsbot serve` hosts it: the Chat the bot
// posts status threads through, and the source of the requests it passes to
// an Inbound. Slack, Matrix and the console each implement it in their own
// package under bot/; nothing but cmd imports an adapter.
//
// Life cycle: serve builds every enabled adapter from the config, hands them
// (as Chats, by Platform) to the App, then calls Run on each with the App's
// Inbound. Ready reports whether it can take requests now (for /readyz).
// Cancelling Run's ctx stops it; Chat calls made after that may fail.
type Adapter interface {
	Chat
	// Platform is the adapter's name and its users' auth key prefix:
	// "slack", "matrix", "console".
	Platform() string
	// Run connects to the platform and passes every verified, deduplicated
	// request to in until ctx ends, reconnecting with backoff when the
	// connection drops. It returns nil after ctx ends, and an error only when
	// it cannot serve at all (bad credentials, a bad homeserver URL).
	Run(ctx context.Context, in Inbound) error
	// Ready returns nil while the adapter is connected and takes requests,
	// else an error that says why not ("connecting to Slack", "sync failing:
	// ..."). Safe for concurrent use.
	Ready() error
}

// Rejecter is an HTTPAdapter that refuses deliveries by its platform's own
// checks (a signature, a timestamp) before they reach the door: opsbot serve
// gives it count, told of each refusal's reason, so that floods of forged
// traffic are counted (opsbot_http_rejected_total), not stored or logged
// one by one.
type Rejecter interface {
	CountRejects(count func(reason string))
}

// ErrBodyRefused is what an HTTPAdapter's route gets reading a request body
// that opsbot serve's listener refused or cut (too many being read at once,
// too slow, too large, broken): the listener has answered the request and
// counted it, and the route answers and counts nothing more.
var ErrBodyRefused = errors.New("request body refused: the listener answered the request")

// HTTPAdapter is an Adapter that also receives deliveries on opsbot's own HTTP
// listener (`http.listen`), such as Slack's HTTP mode on POST /slack/events.
type HTTPAdapter interface {
	Adapter
	// Routes are the handlers serve mounts, by net/http ServeMux pattern
	// ("POST /slack/events"). They may be called before Run starts: until
	// then they answer 503.
	Routes() map[string]http.Handler
}

// Transient is a Chat whose rooms nobody reads once this process ends (a
// terminal): a schedule added there reports elsewhere by default (see
// Dispatcher.SetReportRooms), as does anything posted after the process
// ends. A platform with no Chat in this process counts as transient too.
type Transient interface {
	Transient() bool
}

// The door's face for adapters: a leader's lease (a Matrix sync's) is held
// by the runtime's locker (leases.Leases, App.Leases).
type Hold = leases.Hold

// ErrLeasesClosed is leases.ErrClosed: the leases were closed, the
// process is stopping.
var ErrLeasesClosed = leases.ErrClosed

// What an adapter that knows more about its users supplies to the door's
// auth (package auth decides with it): a platform's user groups, and
// users' power levels in rooms. Aliases, so that adapters speak only the
// door's vocabulary.
type (
	Membership = auth.Membership
	RoomLevels = auth.RoomLevels
)
