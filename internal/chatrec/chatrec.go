// Package chatrec is a chat.Chat that records what it is sent, for tests:
// the chat the door and the job runtime post to when no platform runs
// (the real adapters have their own tests against real servers).
//
// It imports nothing of ours but chat, so that every package's tests may
// use it, bot's own package-internal tests included. Only tests import it
// (internal/arch holds to that).
package chatrec

import (
	"context"
	"fmt"
	"sync"

	"github.com/opsbot/opsbot/chat"
)

// Recorder is a chat.Chat held in memory that keeps every call: what was
// posted, and each message's edits and replies. Post and Reply number the
// messages they create "1", "2", ... in call order, one counter for both,
// and answer a Ref in the room they were given (a reply: its parent's
// room); Edit and Reply accept any Ref, known or not. Nothing fails. It
// is safe for concurrent use; make one with New.
type Recorder struct {
	mu      sync.Mutex
	n       int
	posts   []chat.Message
	edits   map[string][]chat.Message
	reps    map[string][]chat.Message
	allReps []chat.Message
}

var _ chat.Chat = (*Recorder)(nil)

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{edits: map[string][]chat.Message{}, reps: map[string][]chat.Message{}}
}

// Post records m as a new message in room.
func (c *Recorder) Post(_ context.Context, room string, m chat.Message) (chat.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.posts = append(c.posts, m)
	return chat.Ref{Room: room, ID: fmt.Sprint(c.n)}, nil
}

// Edit records m as an edit of the message ref names.
func (c *Recorder) Edit(_ context.Context, ref chat.Ref, m chat.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.edits[ref.ID] = append(c.edits[ref.ID], m)
	return nil
}

// Reply records m as a reply in the thread of the message ref names.
func (c *Recorder) Reply(_ context.Context, ref chat.Ref, m chat.Message) (chat.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.reps[ref.ID] = append(c.reps[ref.ID], m)
	c.allReps = append(c.allReps, m)
	return chat.Ref{Room: ref.Room, ID: fmt.Sprint(c.n)}, nil
}

// Posts returns a copy of the messages posted so far (edits and replies
// not included), in order.
func (c *Recorder) Posts() []chat.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chat.Message(nil), c.posts...)
}

// Thread returns copies of the edits of message id and of the replies to
// it so far, each in order.
func (c *Recorder) Thread(id string) (edits, replies []chat.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chat.Message(nil), c.edits[id]...), append([]chat.Message(nil), c.reps[id]...)
}

// Replies returns a copy of every reply so far, to any message, in order.
func (c *Recorder) Replies() []chat.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chat.Message(nil), c.allReps...)
}
