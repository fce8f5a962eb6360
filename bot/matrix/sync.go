package matrix

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
)

// syncTimeout is how long one sync request waits for new events.
const syncTimeout = 30 * time.Second

// timelineFilter asks for up to 100 events per room in one response, so that
// the commands sent while no opsbot was syncing arrive together.
const timelineFilter = `{"room":{"timeline":{"limit":100}}}`

// syncer is one holder's sync loop.
type syncer struct {
	a     *Adapter
	state State // the sync position, the login, the device keys' seal
	keys  KeyDB // mautrix's tables, with matrix.encryption
	cli   *mautrix.Client
	in    bot.Inbound

	crypto  e2ee           // the device's encryption while syncing; nil without matrix.encryption
	waiting sync.WaitGroup // encrypted events waiting for their room keys
}

// run syncs while hold is held and ctx lasts.
// stopWhenLost calls stop when hold is lost: the runtime's heartbeat renews
// the lease beside the sync (a sync waits up to 30 s) and marks the hold
// lost when another process took it over, or when the runtime stops (its
// jobs have ended). The channel returned closes when it is done watching
// (ctx ended, or stop called).
func (s *syncer) stopWhenLost(ctx context.Context, hold *bot.Hold, stop func()) <-chan struct{} {
	a := s.a
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		select {
		case <-ctx.Done():
		case <-hold.Lost():
			if err := hold.Check(); errors.Is(err, bot.ErrLeasesClosed) {
				a.log.Info("opsbot is stopping: the matrix sync stops")
			} else {
				a.log.Error("lost the matrix sync lease: another opsbot process may sync now; standing by", "err", err)
			}
			stop()
		}
	}()
	return lost
}

func (s *syncer) run(ctx context.Context, hold *bot.Hold) {
	a := s.a
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	lost := s.stopWhenLost(ctx, hold, stop)
	defer func() { stop(); <-lost }()

	a.joinAllowed(ctx, s.cli)
	if a.cfg.Encryption {
		c := s.startCrypto(ctx)
		if c == nil {
			return
		}
		login := s.cli
		s.crypto, s.cli = c, c.client()
		a.client.Store(s.cli)
		a.log.Info("end-to-end encryption on", "device", c.device(), "session_key", c.fingerprint())
		defer func() {
			stop()
			s.waiting.Wait()
			a.client.Store(login)
			s.crypto, s.cli = nil, login
			a.trust.Store(nil)
			c.close()
		}()
	}
	// Read whether or not matrix.power_levels is set now: a reload may set it.
	a.fetchAllLevels(ctx, s.cli)
	since, err := s.state.SyncToken(ctx, a.syncTokenKey())
	if err != nil {
		a.setNotReady("sync failing: " + err.Error())
		a.log.Error("read the sync token", "err", err)
		return
	}
	first := since == ""
	// The first request returns at once, so that Ready tells soon whether
	// the homeserver answers; the next ones wait for events.
	quick := true
	backoff := time.Second
	for ctx.Err() == nil {
		timeout := syncTimeout
		if quick {
			timeout = 0
		}
		resp, err := s.cli.FullSyncRequest(ctx, mautrix.ReqSync{Timeout: int(timeout / time.Millisecond), Since: since, FilterID: timelineFilter})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.setNotReady("sync failing: " + err.Error())
			a.log.Warn("sync failed; retrying", "in", backoff, "err", err)
			if errors.Is(err, mautrix.MUnknownToken) && a.cfg.Password != "" && a.cfg.AccessToken == "" {
				s.cli.AccessToken = ""
				if lerr := a.passwordLogin(ctx, s.state, s.cli); lerr != nil {
					a.log.Error("log in again", "err", lerr)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
		a.setReady()
		if s.crypto != nil {
			s.crypto.sync(ctx, resp, since)
		}
		s.handle(ctx, resp, first)
		if ctx.Err() != nil || hold.Check() != nil {
			// Stopped mid-response: the token is not stored, and the
			// events handled are claimed, so the next holder resumes here.
			return
		}
		if err := s.state.SetSyncToken(ctx, a.syncTokenKey(), resp.NextBatch); err != nil {
			if hold.Check() != nil {
				return // the bot stopped (its store with it) or another process syncs now
			}
			a.log.Error("store the sync token", "err", err)
		}
		since, first, quick = resp.NextBatch, false, false
	}
}

// joinAllowed joins every allowed room; a room the bot is not invited to yet
// is joined when the invite comes.
func (a *Adapter) joinAllowed(ctx context.Context, cli *mautrix.Client) {
	for _, r := range a.cfg.Rooms {
		if _, err := cli.JoinRoomByID(ctx, id.RoomID(r)); err != nil && ctx.Err() == nil {
			a.log.Warn("join an allowed room (joined when invited)", "room", r, "err", err)
		}
	}
}

// handle acts on one sync response. On the first sync of an account (no
// token stored) the timelines are history: only invites are acted on.
func (s *syncer) handle(ctx context.Context, resp *mautrix.RespSync, first bool) {
	a := s.a
	for room := range resp.Rooms.Invite {
		s.invite(ctx, room)
	}
	for room := range resp.Rooms.Leave {
		a.setLevels(room, nil)
	}
	for room, jr := range resp.Rooms.Join {
		// The state before the timeline, then the timeline in order: a
		// power level change and a command sent after it are taken in the
		// order they were sent.
		for _, evt := range jr.State.Events {
			s.stateEvent(ctx, room, evt)
		}
		if jr.Timeline.Limited && !first {
			a.log.Warn("some events of this room were not delivered (more than the timeline limit since the last sync)", "room", room)
		}
		for _, evt := range jr.Timeline.Events {
			if ctx.Err() != nil {
				return
			}
			if evt.StateKey != nil {
				s.stateEvent(ctx, room, evt)
			}
			if first {
				continue
			}
			evt.RoomID = room
			s.event(ctx, evt)
		}
	}
}

// invite joins room or declines the invite, as the door says (the room is
// in matrix.rooms or not; it audits a decline). When the door cannot
// answer (opsbot is stopping), the invite is left for the next sync.
func (s *syncer) invite(ctx context.Context, room id.RoomID) {
	a := s.a
	// The invite is to the bot: it names the bot as the request's user,
	// as the audit of a declined invite always has.
	r := s.in.Handle(ctx, bot.Request{Platform: Platform, User: a.cfg.UserID, Room: string(room), Text: "(invite)", Invite: true})
	switch {
	case r.Outcome == bot.Answered:
		if _, err := s.cli.JoinRoomByID(ctx, room); err != nil {
			a.log.Warn("join an allowed room on invite", "room", room, "err", err)
		} else {
			a.log.Info("joined on invite", "room", room)
		}
	case r.Outcome == bot.Refused && r.Refusal == bot.RefusedRoom:
		if _, err := s.cli.LeaveRoom(ctx, room); err != nil {
			a.log.Warn("decline an invite", "room", room, "err", err)
		}
		a.log.Info("declined an invite to a room outside matrix.rooms", "room", room)
	default:
		a.log.Warn("an invite was neither accepted nor declined", "room", room, "outcome", r.Outcome, "err", r.Err)
	}
}

// stateEvent takes a state event of room: power levels, and for encryption
// membership and the room's encryption.
func (s *syncer) stateEvent(ctx context.Context, room id.RoomID, evt *event.Event) {
	s.a.levelsEvent(room, evt)
	if s.crypto != nil {
		s.crypto.state(ctx, room, evt)
	}
}

// knowLevels makes sure room's power levels are known before a request from
// it is judged (they are unknown only when reading them failed at the start
// of the sync).
func (s *syncer) knowLevels(ctx context.Context, room id.RoomID) {
	a := s.a
	if a.hasLevels(room) {
		return
	}
	if err := a.fetchLevels(ctx, s.cli, room); err != nil {
		a.log.Warn("power levels unknown: matrix.power_levels grants no role in this room for this request", "room", room, "err", err)
	}
}

// event acts on one timeline event.
func (s *syncer) event(ctx context.Context, evt *event.Event) {
	a := s.a
	if evt.Sender == a.user {
		return
	}
	evt.Type.Class = event.MessageEventType
	switch evt.Type {
	case event.EventMessage:
		if !parsed(evt) {
			return
		}
		s.message(ctx, evt, evt.Content.AsMessage())
	case event.EventReaction:
		if !parsed(evt) {
			return
		}
		s.reaction(ctx, evt, evt.Content.AsReaction())
	case event.EventEncrypted:
		s.encrypted(ctx, evt)
	}
}

// parsed parses evt's content unless it is already (a decrypted event's is).
func parsed(evt *event.Event) bool {
	return evt.Content.Parsed != nil || evt.Content.ParseRaw(evt.Type) == nil
}

// message hands a `!command` to the door and posts its reply. The door
// claims the event (a sync replayed after a crash, or a second opsbot taking
// over the sync, acts on it once), checks the room and the command's age
// (matrix.stale_after), and audits each decision; a room off matrix.rooms
// gets no answer (it would be public).
func (s *syncer) message(ctx context.Context, evt *event.Event, c *event.MessageEventContent) {
	if c.MsgType != event.MsgText || (c.RelatesTo != nil && c.RelatesTo.Type == event.RelReplace) {
		return
	}
	text := strings.TrimSpace(c.Body)
	if !strings.HasPrefix(text, "!") {
		return
	}
	if s.a.allowed[evt.RoomID] {
		s.knowLevels(ctx, evt.RoomID)
	}
	reply := s.in.Handle(ctx, bot.Request{Platform: Platform, User: string(evt.Sender), Room: string(evt.RoomID),
		Text: text, ReplyTo: string(evt.ID), Delivery: string(evt.ID), SentAt: time.UnixMilli(evt.Timestamp)})
	s.show(ctx, evt, reply)
}

// reaction confirms (✅) or aborts (❌) the preview it reacts to, or
// approves or rejects the request for approval it reacts to; the door
// finds what that message shows.
func (s *syncer) reaction(ctx context.Context, evt *event.Event, c *event.ReactionEventContent) {
	if c.RelatesTo.Type != event.RelAnnotation {
		return
	}
	var kind bot.ActionKind
	switch strings.TrimRight(c.RelatesTo.Key, "\ufe0f") {
	case "✅", "✔", "👍":
		kind = bot.ActConfirm
	case "❌", "✖", "👎":
		kind = bot.ActAbort
	default:
		return
	}
	if s.a.allowed[evt.RoomID] {
		s.knowLevels(ctx, evt.RoomID)
	}
	reply := s.in.Act(ctx, bot.ActionRequest{ID: string(kind), Platform: Platform, User: string(evt.Sender), Room: string(evt.RoomID),
		Message: string(c.RelatesTo.EventID), Delivery: string(evt.ID)})
	s.show(ctx, evt, reply)
}

// show posts a reply: nothing for a queued job (its status message
// follows) unless the reply is for the room (an approval's outcome), a delivery handled before, a reaction to nothing, or a refusal
// for the room (the room is not one the bot obeys); else an m.notice
// answering the event. A preview's message is recorded with the door, so a
// reaction to it settles its confirmation.
func (s *syncer) show(ctx context.Context, evt *event.Event, r bot.Reply) {
	switch {
	case r.Outcome == bot.Queued && r.Audience != bot.ToRoom, r.Outcome == bot.Duplicate, r.Outcome == bot.Ignored, r.Text == "":
		return
	case r.Outcome == bot.Refused && r.Refusal == bot.RefusedRoom:
		s.a.log.Info("ignored a command in a room outside matrix.rooms", "room", evt.RoomID, "sender", evt.Sender)
		return
	}
	text := r.Text
	_, hasConfirm := r.Action(bot.ActConfirm)
	_, hasApprove := r.Action(bot.ActApprove)
	preview := r.Token != "" && ((r.Outcome == bot.NeedsConfirm && hasConfirm) || (r.Outcome == bot.NeedsApproval && hasApprove))
	switch {
	case preview && r.Outcome == bot.NeedsApproval:
		text += "\nReact ✅ to approve or ❌ to reject."
	case preview:
		text += "\nReact ✅ to confirm or ❌ to abort."
	}
	ev := s.notice(ctx, evt, text)
	if ev != "" && preview {
		if err := s.in.Previewed(ctx, r.Token, string(ev)); err != nil {
			s.a.log.Warn("record a preview: reactions to it will not settle it (typing `!confirm TOKEN` still does)", "event", ev, "err", err)
		}
	}
}

// notice posts text as an m.notice answering evt, and returns its event id
// ("" when it could not be sent).
func (s *syncer) notice(ctx context.Context, evt *event.Event, text string) id.EventID {
	ref, err := s.a.Post(ctx, string(evt.RoomID), bot.Message{Kind: bot.KindNotice, Text: text, ReplyTo: string(evt.ID)})
	if err != nil {
		s.a.log.Warn("post a reply", "room", evt.RoomID, "err", err)
		return ""
	}
	return id.EventID(ref.ID)
}
