package matrix

import (
	"context"
	"errors"
	"fmt"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
)

// e2ee is end-to-end encryption for the device the adapter syncs as
// (crypto.go, in builds with -tags goolm; crypto_plain.go refuses it in
// others). One exists only while this process holds the sync lease: the
// keys are the device's, and two processes ratcheting the same sessions
// would make each other's messages unreadable.
type e2ee interface {
	// client is the device's client: what it sends to an encrypted room
	// it encrypts.
	client() *mautrix.Client
	device() id.DeviceID
	// fingerprint is the device's ed25519 key as Element shows it ("Session
	// key"), for verifying the device by hand.
	fingerprint() string
	// sync takes a sync response's device list changes, to-device events
	// (the room keys others share) and one-time key counts. It runs before
	// the response's rooms are handled.
	sync(ctx context.Context, resp *mautrix.RespSync, since string)
	// state records a state event of room (membership, encryption).
	state(ctx context.Context, room id.RoomID, evt *event.Event)
	// decrypt returns the event inside an m.room.encrypted one, or an error
	// wrapping errNoKeys when its room key has not reached the device.
	decrypt(ctx context.Context, evt *event.Event) (*event.Event, error)
	// awaitKeys waits up to d for the room key of evt, asking the sender's
	// devices for it on the way; true when it came.
	awaitKeys(ctx context.Context, evt *event.Event, d time.Duration) bool
	// encrypted reports whether room is encrypted, as far as the device
	// knows; knowRoom makes sure it knows (reads the room's state once).
	encrypted(ctx context.Context, room id.RoomID) bool
	knowRoom(ctx context.Context, room id.RoomID) error
	close()
}

// errNoKeys: the room key of an encrypted event has not reached the device.
var errNoKeys = errors.New("the room key has not reached opsbot's device")

// errNotHolder is wrapped when a process without the device's keys (it does
// not sync the account) is asked to send to an encrypted room.
var errNotHolder = errors.New("the room is encrypted and this opsbot process does not hold the account's keys " +
	"(the process that syncs the account does); not sent")

// DefaultKeyWait is how long an encrypted command whose room key has not
// arrived waits for it (asking the sender's devices for it after a third)
// before the sender is told it could not be read.
const DefaultKeyWait = 30 * time.Second

// undecryptableEvery is the least time between two "cannot decrypt" notices
// to one sender in one room: a client that never shares keys with the bot
// would otherwise get one for every message it sends.
const undecryptableEvery = 10 * time.Minute

// startCrypto starts encryption for the sync, retrying with backoff while
// the homeserver does not answer; nil when ctx ended first.
func (s *syncer) startCrypto(ctx context.Context) e2ee {
	a := s.a
	for backoff := time.Second; ; backoff = min(2*backoff, time.Minute) {
		c, err := startE2EE(ctx, a, s.cli, s.state, s.keys)
		if err == nil {
			return c
		}
		if ctx.Err() != nil {
			return nil
		}
		a.setNotReady("end-to-end encryption: " + err.Error())
		a.log.Error("start end-to-end encryption; retrying", "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// encrypted acts on an m.room.encrypted event: the event inside it is acted
// on like any other. When its room key has not arrived yet, in a room of
// matrix.rooms, that is waited for beside the sync (the key comes in a later
// sync response); elsewhere no key is asked for. An event that cannot be
// read goes to the door unread (undecryptable).
func (s *syncer) encrypted(ctx context.Context, evt *event.Event) {
	a := s.a
	if s.crypto == nil {
		why := "matrix.encryption is off in opsbot's config"
		if !config.MatrixEncryptionBuilt {
			why = "end-to-end encryption is not in this build of opsbot"
		}
		s.undecryptable(ctx, evt, errors.New(why))
		return
	}
	inner, err := s.crypto.decrypt(ctx, evt)
	if errors.Is(err, errNoKeys) && a.allowed[evt.RoomID] {
		s.waiting.Add(1)
		go func() {
			defer s.waiting.Done()
			if s.crypto.awaitKeys(ctx, evt, a.KeyWait) {
				inner, err = s.crypto.decrypt(ctx, evt)
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.undecryptable(ctx, evt, err)
				return
			}
			s.event(ctx, inner)
		}()
		return
	}
	if err != nil {
		s.undecryptable(ctx, evt, err)
		return
	}
	s.event(ctx, inner)
}

// undecryptable hands evt, which could not be read, to the door: it claims
// the event, refuses it in a room off matrix.rooms (no answer there) and
// audits it. Admitted, its sender is told that nothing was run and how to
// let the bot read their messages: without encryption, at every such
// event; with it, at most once per sender and room every undecryptableEvery.
func (s *syncer) undecryptable(ctx context.Context, evt *event.Event, err error) {
	a := s.a
	r := s.in.Handle(ctx, bot.Request{Platform: Platform, User: string(evt.Sender), Room: string(evt.RoomID), Text: "(encrypted)",
		ReplyTo: string(evt.ID), Delivery: string(evt.ID), SentAt: time.UnixMilli(evt.Timestamp), Unreadable: err.Error()})
	if r.Outcome != bot.Refused || r.Refusal != bot.RefusedUnreadable {
		s.show(ctx, evt, r) // a replay, a room off the list, opsbot stopping or its store down
		return
	}
	if s.crypto == nil {
		s.notice(ctx, evt, "🔒 I cannot read encrypted messages: "+err.Error()+". "+
			"Send commands in a room without encryption, or ask whoever runs opsbot to turn on matrix.encryption.")
		return
	}
	a.log.Warn("could not decrypt an event", "room", evt.RoomID, "sender", evt.Sender, "event", evt.ID, "err", err)
	k := string(evt.RoomID) + " " + string(evt.Sender)
	now := a.Now()
	a.mu.Lock()
	if last, ok := a.toldUndecryptable[k]; ok && now.Sub(last) < undecryptableEvery {
		a.mu.Unlock()
		return
	}
	a.toldUndecryptable[k] = now
	a.mu.Unlock()
	why := "its room key did not reach me"
	if !errors.Is(err, errNoKeys) {
		why = "it could not be decrypted (" + err.Error() + ")"
	}
	s.notice(ctx, evt, fmt.Sprintf("🔒 I could not read your encrypted message sent at %s UTC: %s, so no command in it was run: "+
		"send the command again. If this repeats, your client is not sharing room keys with opsbot's device %s. "+
		"That device is cross-signed by its own account, so it should show as verified by its owner; if it does not, "+
		"ask whoever runs opsbot to look at its /readyz (an unsigned device is named there with what to do).",
		time.UnixMilli(evt.Timestamp).UTC().Format("15:04:05"), why, s.crypto.device()))
}

// beforeSend refuses to send to an encrypted room in the clear: with
// matrix.encryption on, a client without the device's keys (a process that
// does not sync the account) sends only to rooms that are not encrypted, and
// the device's own client first learns whether a room it has not read is.
func (a *Adapter) beforeSend(ctx context.Context, cli *mautrix.Client, room id.RoomID) error {
	if !a.cfg.Encryption {
		return nil
	}
	if c, ok := cli.Crypto.(e2ee); ok {
		return c.knowRoom(ctx, room)
	}
	a.mu.Lock()
	enc := a.encryptedRooms[room]
	a.mu.Unlock()
	if !enc {
		var c event.EncryptionEventContent
		err := cli.StateEvent(ctx, room, event.StateEncryption, "", &c)
		switch {
		case errors.Is(err, mautrix.MNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("matrix: cannot tell whether %s is encrypted, so not sending to it in the clear: %w", room, err)
		}
		a.mu.Lock()
		a.encryptedRooms[room] = true
		a.mu.Unlock()
	}
	return fmt.Errorf("matrix: %s: %w", room, errNotHolder)
}
