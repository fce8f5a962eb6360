package slack

import (
	"context"
	"sync"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// editPacer keeps chat.update of one message to one call per EditInterval:
// an edit that comes sooner is held, a later one replaces it, and the held
// edit is sent when the interval is up. A final edit goes at once, after any
// edit in flight and instead of any held one, so the last state is always
// the one shown. Safe for concurrent use.
type editPacer struct {
	mu   sync.Mutex
	refs map[bot.Ref]*pacedRef
}

type pacedRef struct {
	send  sync.Mutex // held while an update of this message is sent: updates keep their order
	last  time.Time  // when the last update went (or the message was posted)
	next  *bot.Message
	timer *time.Timer
	done  bool // the final edit went: nothing held is sent after it
}

func (p *editPacer) get(ref bot.Ref) *pacedRef {
	if p.refs == nil {
		p.refs = map[bot.Ref]*pacedRef{}
	}
	r := p.refs[ref]
	if r == nil {
		r = &pacedRef{}
		p.refs[ref] = r
	}
	return r
}

// finishedKept is how long a message stays known after its final edit, so
// that a late edit is still recognised as late.
const finishedKept = 10 * time.Minute

// sweep forgets messages whose final edit is older than finishedKept.
func (p *editPacer) sweep(now time.Time) {
	for ref, r := range p.refs {
		if r.done && now.Sub(r.last) > finishedKept {
			delete(p.refs, ref)
		}
	}
}

// posted notes that ref was just posted: its first edit counts from now.
func (a *Adapter) posted(ref bot.Ref) {
	a.edits.mu.Lock()
	a.edits.get(ref).last = time.Now()
	a.edits.mu.Unlock()
}

// Edit replaces a message's text with chat.update, at most once per
// EditInterval per message: an edit that comes sooner is held and sent when
// the interval is up (its error is logged, not returned), replaced by any
// later edit. A final status edit is sent at once and also gets the
// outcome's reaction.
func (a *Adapter) Edit(ctx context.Context, ref bot.Ref, m bot.Message) error {
	p := &a.edits
	p.mu.Lock()
	r := p.get(ref)
	if m.Final {
		r.done, r.next = true, nil
		if r.timer != nil && r.timer.Stop() {
			a.tasks.done()
		}
		r.timer = nil
		r.last = time.Now()
		p.sweep(r.last)
		p.mu.Unlock()
		r.send.Lock()
		defer r.send.Unlock()
		return a.update(ctx, ref, m)
	}
	now := time.Now()
	if r.done {
		p.mu.Unlock()
		return nil // an edit after the final one: the final state stays
	}
	if wait := EditInterval - now.Sub(r.last); r.timer != nil || wait > 0 {
		r.next = &m
		if r.timer == nil {
			a.tasks.add()
			r.timer = time.AfterFunc(wait, func() { defer a.tasks.done(); a.sendHeld(ref, r) })
		}
		p.mu.Unlock()
		return nil
	}
	r.last = now
	p.mu.Unlock()
	r.send.Lock()
	defer r.send.Unlock()
	return a.update(ctx, ref, m)
}

// sendHeld sends the edit held for ref when its interval is up.
func (a *Adapter) sendHeld(ref bot.Ref, r *pacedRef) {
	r.send.Lock()
	defer r.send.Unlock()
	a.edits.mu.Lock()
	m := r.next
	r.next, r.timer = nil, nil
	r.last = time.Now()
	done := r.done
	a.edits.mu.Unlock()
	if m == nil || done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	if err := a.update(ctx, ref, *m); err != nil {
		a.log.Warn("edit status message", "channel", ref.Room, "ts", ref.ID, "err", err)
	}
}
