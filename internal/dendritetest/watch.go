package dendritetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// Event is one room event as a member's client sees it.
type Event struct {
	Room     id.RoomID
	ID       id.EventID
	Sender   id.UserID
	Type     string
	At       time.Time // when the watcher received it
	TS       time.Time // origin_server_ts: when the homeserver took it
	MsgType  string
	Body     string
	HTML     string
	NewBody  string // m.new_content's body, on an edit
	RelType  string
	RelTo    id.EventID
	ReplyTo  id.EventID
	Key      string     // a reaction's key
	Redacts  id.EventID // the event an m.room.redaction takes back
	Member   string     // a membership, on m.room.member
	StateKey string
	// Encrypted: the event came as m.room.encrypted, and this is what
	// decrypting it gave (an E2EEMember's watcher).
	Encrypted bool
}

// ParseEvent reads the fields of Event from evt's raw content.
func ParseEvent(room id.RoomID, evt *event.Event, at time.Time) Event {
	m := Event{Room: room, ID: evt.ID, Sender: evt.Sender, Type: evt.Type.Type, At: at, TS: time.UnixMilli(evt.Timestamp)}
	if evt.StateKey != nil {
		m.StateKey = *evt.StateKey
	}
	var c struct {
		MsgType       string     `json:"msgtype"`
		Body          string     `json:"body"`
		FormattedBody string     `json:"formatted_body"`
		Membership    string     `json:"membership"`
		Redacts       id.EventID `json:"redacts"`
		NewContent    *struct {
			Body string `json:"body"`
		} `json:"m.new_content"`
		RelatesTo *struct {
			RelType   string     `json:"rel_type"`
			EventID   id.EventID `json:"event_id"`
			Key       string     `json:"key"`
			InReplyTo *struct {
				EventID id.EventID `json:"event_id"`
			} `json:"m.in_reply_to"`
		} `json:"m.relates_to"`
	}
	_ = json.Unmarshal(evt.Content.VeryRaw, &c)
	m.MsgType, m.Body, m.HTML, m.Member = c.MsgType, c.Body, c.FormattedBody, c.Membership
	m.Redacts = evt.Redacts // the room versions before 11 keep it outside the content
	if m.Redacts == "" {
		m.Redacts = c.Redacts
	}
	if c.NewContent != nil {
		m.NewBody = c.NewContent.Body
	}
	if r := c.RelatesTo; r != nil {
		m.RelType, m.RelTo, m.Key = r.RelType, r.EventID, r.Key
		if r.InReplyTo != nil {
			m.ReplyTo = r.InReplyTo.EventID
		}
	}
	return m
}

// Watcher keeps every event of a client's joined rooms, as its sync
// delivers them. Safe for concurrent use.
type Watcher struct {
	mu     sync.Mutex
	events []Event
	wake   chan struct{}
}

// NewWatcher returns a Watcher fed by Add only.
func NewWatcher() *Watcher { return &Watcher{wake: make(chan struct{}, 1)} }

// Watch syncs cli until the test ends and keeps the state and timeline
// events of its joined rooms.
func Watch(t testing.TB, cli *mautrix.Client) *Watcher {
	w := NewWatcher()
	SyncLoop(t, cli, func(_ context.Context, resp *mautrix.RespSync, _ string) {
		now := time.Now()
		var got []Event
		for room, jr := range resp.Rooms.Join {
			for _, evt := range append(jr.State.Events, jr.Timeline.Events...) {
				got = append(got, ParseEvent(room, evt, now))
			}
		}
		w.Add(got)
	})
	return w
}

// SyncLoop syncs cli until the test ends, handing each response to handle
// (since is the token the response answers; "" for the first).
func SyncLoop(t testing.TB, cli *mautrix.Client, handle func(ctx context.Context, resp *mautrix.RespSync, since string)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		since := ""
		for ctx.Err() == nil {
			resp, err := cli.FullSyncRequest(ctx, mautrix.ReqSync{Timeout: 10000, Since: since})
			if err != nil {
				if ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond) // a failed sync: retry soon (not a test timing)
				}
				continue
			}
			handle(ctx, resp, since)
			since = resp.NextBatch
		}
	}()
}

// Add keeps es and wakes the waiters.
func (w *Watcher) Add(es []Event) {
	w.mu.Lock()
	w.events = append(w.events, es...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// All returns the events kept so far that match f.
func (w *Watcher) All(f func(Event) bool) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Event
	for _, e := range w.events {
		if f(e) {
			out = append(out, e)
		}
	}
	return out
}

// Wait returns the first event that matches f, failing t when none has
// come within d.
func (w *Watcher) Wait(t testing.TB, d time.Duration, what string, f func(Event) bool) Event {
	t.Helper()
	return w.WaitWhile(t, d, what, nil, nil, f)
}

// WaitWhile is Wait that also fails t as soon as gone is closed (the bot's
// process exited, say); note, when not nil, adds to the failure what it
// returns (that process's output).
func (w *Watcher) WaitWhile(t testing.TB, d time.Duration, what string, gone <-chan struct{}, note func() string, f func(Event) bool) Event {
	t.Helper()
	if note == nil {
		note = func() string { return "" }
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if es := w.All(f); len(es) > 0 {
			return es[0]
		}
		select {
		case <-w.wake:
		case <-gone:
			t.Fatalf("ended before %s:%s", what, note())
		case <-deadline.C:
			t.Fatalf("no %s within %s; seen:\n%s%s", what, d, w.Dump(), note())
		}
	}
}

// Dump lists the messages and reactions kept, one a line, for failures.
func (w *Watcher) Dump() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, e := range w.events {
		if e.Type == "m.room.message" || e.Type == "m.reaction" || e.Type == "undecryptable" {
			enc := ""
			if e.Encrypted {
				enc = " (encrypted)"
			}
			fmt.Fprintf(&b, "  %s %s %s%s rel=%s:%s reply=%s %q %q\n", e.ID, e.Sender, e.Type, enc, e.RelType, e.RelTo, e.ReplyTo, e.Body, e.NewBody)
		}
	}
	return b.String()
}
