//go:build goolm

package dendritetest

import (
	"context"
	"errors"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// E2EEMember is a room member whose client does end-to-end encryption as
// Element does (mautrix's OlmMachine, pure-Go Olm, its keys in memory): it
// sends encrypted messages, and Seen keeps what it decrypts (Encrypted set)
// beside the raw events.
type E2EEMember struct {
	User *User
	Mach *crypto.OlmMachine
	Seen *Watcher

	strict bool // NewStrictE2EEMember

	mu      sync.Mutex
	pending []pendingEvent // events whose room key has not arrived yet
	asked   map[id.SessionID]bool
}

type pendingEvent struct {
	evt  *event.Event
	seen time.Time
}

// AskAfter is how long an E2EEMember waits for a room key before it asks
// the sender's devices for it, as Element does for a message it cannot
// read.
const AskAfter = 2 * time.Second

// Undecryptable is the Type of an Event an E2EEMember could not decrypt;
// its Body says why.
const Undecryptable = "undecryptable"

// NewE2EEMember uploads u's device keys and starts its sync. Nothing else
// may sync u's device (u.Client): its to-device messages, the room keys
// others send it, go to whichever sync asks first.
func NewE2EEMember(t testing.TB, u *User) *E2EEMember { return newE2EEMember(t, u, false) }

// NewStrictE2EEMember is an E2EEMember that behaves as Element does with
// "exclude insecure devices" (MSC4153; Element's default from April 2026):
// it shares its room keys only with devices their owner has cross-signed
// (mautrix's SendKeysMinTrust at TrustStateCrossSignedTOFU: signed by the
// owner's self-signing key, the owner's master key trusted on first use),
// and a message from any other device is not shown: Seen gets it as an
// Undecryptable event whose Body names the sender's trust state.
func NewStrictE2EEMember(t testing.TB, u *User) *E2EEMember { return newE2EEMember(t, u, true) }

// InsecureSender starts the Body of an Undecryptable event that a strict
// member refused because its sending device is not cross-signed.
const InsecureSender = "sent by a device its owner has not cross-signed"

func newE2EEMember(t testing.TB, u *User, strict bool) *E2EEMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	states := mautrix.NewMemoryStateStore()
	u.Client.StateStore = states
	m := &E2EEMember{User: u, Seen: NewWatcher(), asked: map[id.SessionID]bool{}}
	var log *zerolog.Logger
	if os.Getenv("OPSBOT_TEST_LOG") != "" {
		l := zerolog.New(os.Stderr).With().Str("member", u.ID.String()).Timestamp().Logger()
		log = &l
	}
	m.Mach = crypto.NewOlmMachine(u.Client, log, &memStore{MemoryStore: crypto.NewMemoryStore(nil)}, states.(crypto.StateStore))
	if strict {
		m.strict = true
		m.Mach.SendKeysMinTrust = id.TrustStateCrossSignedTOFU
		m.Mach.ShareKeysMinTrust = id.TrustStateCrossSignedTOFU
	}
	if err := m.Mach.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Mach.ShareKeys(ctx, -1); err != nil {
		t.Fatalf("upload %s's device keys: %v", u.ID, err)
	}
	SyncLoop(t, u.Client, m.handle)
	return m
}

// handle takes one sync response: room keys first, then the rooms' state,
// then their timelines, decrypting what it can (and, again, what waited for
// a key).
func (m *E2EEMember) handle(ctx context.Context, resp *mautrix.RespSync, since string) {
	m.Mach.ProcessSyncResponse(ctx, resp, since)
	now := time.Now()
	var got []Event
	for room, jr := range resp.Rooms.Join {
		for _, evt := range append(jr.State.Events, jr.Timeline.Events...) {
			if evt.StateKey == nil {
				continue
			}
			evt.RoomID, evt.Type.Class = room, event.StateEventType
			if evt.Content.ParseRaw(evt.Type) == nil {
				mautrix.UpdateStateStore(ctx, m.User.Client.StateStore, evt)
				if evt.Type == event.StateMember {
					m.Mach.HandleMemberEvent(ctx, evt)
				}
			}
		}
		for _, evt := range jr.Timeline.Events {
			evt.RoomID = room
			got = append(got, ParseEvent(room, evt, now))
			if evt.Type == event.EventEncrypted {
				m.mu.Lock()
				m.pending = append(m.pending, pendingEvent{evt, now})
				m.mu.Unlock()
			}
		}
	}
	m.mu.Lock()
	var still []pendingEvent
	var ask []*event.Event
	for _, p := range m.pending {
		evt := p.evt
		evt.Type.Class = event.MessageEventType
		if evt.Content.Parsed == nil && evt.Content.ParseRaw(event.EventEncrypted) != nil {
			continue
		}
		dec, err := m.Mach.DecryptMegolmEvent(ctx, evt)
		if errors.Is(err, crypto.ErrNoSessionFound) {
			still = append(still, p)
			if sid := evt.Content.AsEncrypted().SessionID; now.Sub(p.seen) >= AskAfter && !m.asked[sid] {
				m.asked[sid] = true
				ask = append(ask, evt)
			}
			continue
		}
		if err != nil {
			// Kept for the failure's dump: what could not be read, and why.
			got = append(got, Event{Room: evt.RoomID, ID: evt.ID, Sender: evt.Sender, Type: Undecryptable, At: now, Body: err.Error()})
			continue
		}
		if m.strict && dec.Mautrix.TrustState < id.TrustStateCrossSignedTOFU {
			got = append(got, Event{Room: evt.RoomID, ID: evt.ID, Sender: evt.Sender, Type: Undecryptable, At: now,
				Body: InsecureSender + " (trust " + dec.Mautrix.TrustState.String() + ")"})
			continue
		}
		d := ParseEvent(evt.RoomID, dec, now)
		d.Encrypted = true
		if outer := evt.Content.AsEncrypted().RelatesTo; d.RelType == "" && outer != nil {
			// The relation travels in the clear.
			d.RelType, d.RelTo = string(outer.Type), outer.EventID
		}
		got = append(got, d)
	}
	m.pending = still
	m.mu.Unlock()
	m.Seen.Add(got)
	for _, evt := range ask {
		c := evt.Content.AsEncrypted()
		// Errors are the test's to see: the event then stays unread.
		_ = m.Mach.SendRoomKeyRequest(ctx, evt.RoomID, c.SenderKey, c.SessionID, "", map[id.UserID][]id.DeviceID{evt.Sender: {"*"}})
	}
}

// Send sends text to room encrypted, sharing a room key with the room's
// members' devices first when there is none yet.
func (m *E2EEMember) Send(t testing.TB, room id.RoomID, text string) id.EventID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	content := &event.MessageEventContent{MsgType: event.MsgText, Body: text}
	enc, err := m.Mach.EncryptMegolmEvent(ctx, room, event.EventMessage, content)
	if errors.Is(err, crypto.ErrNoGroupSession) || errors.Is(err, crypto.ErrSessionNotShared) || errors.Is(err, crypto.ErrSessionExpired) {
		joined, jerr := m.User.Client.JoinedMembers(ctx, room)
		if jerr != nil {
			t.Fatal(jerr)
		}
		var members []id.UserID
		for u := range joined.Joined {
			members = append(members, u)
		}
		if err := m.Mach.ShareGroupSession(ctx, room, members); err != nil {
			t.Fatalf("share a room key: %v", err)
		}
		enc, err = m.Mach.EncryptMegolmEvent(ctx, room, event.EventMessage, content)
	}
	if err != nil {
		t.Fatalf("encrypt %q: %v", text, err)
	}
	resp, err := m.User.Client.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	return resp.EventID
}

// Decrypted fetches event evid of room and returns its decrypted content.
func (m *E2EEMember) Decrypted(t testing.TB, room id.RoomID, evid id.EventID) *event.MessageEventContent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evt, err := m.User.Client.GetEvent(ctx, room, evid)
	if err != nil {
		t.Fatal(err)
	}
	evt.RoomID = room
	if err := evt.Content.ParseRaw(event.EventEncrypted); err != nil {
		t.Fatal(err)
	}
	dec, err := m.Mach.DecryptMegolmEvent(ctx, evt)
	if err != nil {
		t.Fatal(err)
	}
	return dec.Content.AsMessage()
}

// CreateEncryptedRoom makes an encrypted (Megolm) room of owner's, with
// invite invited.
func CreateEncryptedRoom(t testing.TB, owner *User, invite ...id.UserID) id.RoomID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	empty := ""
	resp, err := owner.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Invite: invite,
		InitialState: []*event.Event{{Type: event.StateEncryption, StateKey: &empty,
			Content: event.Content{Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}}}}})
	if err != nil {
		t.Fatalf("create an encrypted room: %v", err)
	}
	return resp.RoomID
}

// memStore is mautrix's in-memory crypto store with its key signatures
// under a lock of their own. In mautrix v0.33.0 MemoryStore.PutSignature
// writes its maps under the store's read lock, a data race whenever the
// machine handles two room-key requests at once (each fetches the
// requester's device and stores its signatures); the race detector finds it
// in the encrypted-room tests. Reads return a copy, so no caller reads a map
// a later write changes.
type memStore struct {
	*crypto.MemoryStore
	sigMu sync.RWMutex
}

func (s *memStore) PutSignature(ctx context.Context, signedUser id.UserID, signedKey id.Ed25519, signerUser id.UserID, signerKey id.Ed25519, signature string) error {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
	return s.MemoryStore.PutSignature(ctx, signedUser, signedKey, signerUser, signerKey, signature)
}

func (s *memStore) IsKeySignedBy(ctx context.Context, userID id.UserID, key id.Ed25519, signedByUser id.UserID, signedByKey id.Ed25519) (bool, error) {
	s.sigMu.RLock()
	defer s.sigMu.RUnlock()
	return s.MemoryStore.IsKeySignedBy(ctx, userID, key, signedByUser, signedByKey)
}

func (s *memStore) DropSignaturesByKey(ctx context.Context, userID id.UserID, key id.Ed25519) (int64, error) {
	s.sigMu.Lock()
	defer s.sigMu.Unlock()
	return s.MemoryStore.DropSignaturesByKey(ctx, userID, key)
}

func (s *memStore) GetSignaturesForKeyBy(ctx context.Context, userID id.UserID, key id.Ed25519, signerID id.UserID) (map[id.Ed25519]string, error) {
	s.sigMu.RLock()
	defer s.sigMu.RUnlock()
	sigs, err := s.MemoryStore.GetSignaturesForKeyBy(ctx, userID, key, signerID)
	return maps.Clone(sigs), err
}
