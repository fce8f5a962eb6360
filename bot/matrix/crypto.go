//go:build goolm

package matrix

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.mau.fi/util/dbutil"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
	"maunium.net/go/mautrix/sqlstatestore"
)

// olmDevice is the bot's device with its Olm/Megolm keys: mautrix's
// OlmMachine (pure-Go Olm, -tags goolm) over tables in the bot's store
// (mautrix's crypto_* and mx_* tables, through the pure-Go SQLite driver),
// and the room state it needs (who is in a room, whether it is encrypted).
// It is also its client's mautrix.CryptoHelper: that client encrypts what it
// sends to an encrypted room.
type olmDevice struct {
	a      *Adapter
	cli    *mautrix.Client
	db     *sql.DB
	mach   *crypto.OlmMachine
	states *sqlstatestore.SQLStateStore
	pickle []byte // seals the device's secrets (and the recovery key) in the store

	// ownKeys is the homeserver's answer about the account's keys at
	// start (before this start uploaded any): its cross-signing keys and
	// this device's signatures.
	ownKeys *mautrix.RespQueryKeys

	encMu sync.Mutex // one encryption (and room key share) at a time

	roomsMu sync.Mutex
	rooms   map[id.RoomID]bool // rooms whose state has been read since start
}

var _ mautrix.CryptoHelper = (*olmDevice)(nil)

// startE2EE opens the device's keys in the store (creating them on its
// first start), publishes them when the homeserver does not have them, and
// reads the state of the allowed rooms. login is the logged-in client; st
// keeps the key sealing the device's keys, which live in keys.
func startE2EE(ctx context.Context, a *Adapter, login *mautrix.Client, st State, keys KeyDB) (e2ee, error) {
	if login.DeviceID == "" {
		return nil, errors.New("the login has no device id")
	}
	pickle, err := pickleKey(ctx, a, st)
	if err != nil {
		return nil, err
	}
	db, dialect, err := keys.SideDB()
	if err != nil {
		return nil, err
	}
	d, err := openDevice(ctx, a, login, db, dialect, pickle)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.crossSign(ctx, st, d.ownKeys)
	return d, nil
}

func openDevice(ctx context.Context, a *Adapter, login *mautrix.Client, db *sql.DB, dialect string, pickle []byte) (*olmDevice, error) {
	zl := zerologTo(a.log)
	dbu, err := dbutil.NewWithDB(db, dialect)
	if err != nil {
		return nil, err
	}
	dbu.Log = dbutil.ZeroLogger(zl)
	states := sqlstatestore.NewSQLStateStore(dbu, dbutil.ZeroLogger(zl), false)
	if err := states.Upgrade(ctx); err != nil {
		return nil, fmt.Errorf("prepare the room state tables in the store: %w", err)
	}
	// One account per device: a new device (a new login) starts new keys.
	keys := crypto.NewSQLCryptoStore(dbu, dbutil.ZeroLogger(zl), string(a.user)+"/"+string(login.DeviceID), login.DeviceID, pickle)
	if err := keys.DB.Upgrade(ctx); err != nil {
		return nil, fmt.Errorf("prepare the key tables in the store: %w", err)
	}
	cli, err := a.newClient(login.AccessToken)
	if err != nil {
		return nil, err
	}
	// The client's own request log stays off, as the login client's is: the
	// sync logs its failures itself (a cancelled long poll is no warning).
	cli.DeviceID, cli.StateStore, cli.Log = login.DeviceID, states, zerolog.Nop()
	d := &olmDevice{a: a, cli: cli, db: db, states: states, pickle: pickle, rooms: map[id.RoomID]bool{}}
	d.mach = crypto.NewOlmMachine(cli, &zl, keys, states)
	d.mach.AllowKeyShare = d.allowKeyShare(d.mach.AllowKeyShare)
	cli.Crypto = d
	if err := d.mach.Load(ctx); err != nil {
		return nil, fmt.Errorf("load the device's keys from the store: %w", err)
	}
	if err := d.publish(ctx, keys); err != nil {
		d.mach.Destroy()
		return nil, err
	}
	for _, r := range a.cfg.Rooms {
		if err := d.readRoom(ctx, id.RoomID(r)); err != nil && ctx.Err() == nil {
			a.log.Warn("read an allowed room's state for encryption (read again before the first message to it)", "room", r, "err", err)
		}
	}
	return d, nil
}

// publish makes sure the homeserver has this device's keys: it uploads them
// on the device's first start, and again (new keys) when the homeserver lost
// them. Keys on the homeserver that are not ours mean another client uses
// this device: that is refused.
func (d *olmDevice) publish(ctx context.Context, keys *crypto.SQLCryptoStore) error {
	cli := d.cli
	resp, err := cli.QueryKeys(ctx, &mautrix.ReqQueryKeys{DeviceKeys: map[id.UserID]mautrix.DeviceIDList{cli.UserID: {cli.DeviceID}}})
	if err != nil {
		return fmt.Errorf("ask the homeserver for the device's keys: %w", err)
	}
	d.ownKeys = resp
	dev, ok := resp.DeviceKeys[cli.UserID][cli.DeviceID]
	onServer := ok && len(dev.Keys) > 0
	shared := d.mach.GetAccount().Shared
	switch {
	case onServer && shared:
		if dev.Keys.GetEd25519(cli.DeviceID) != d.mach.OwnIdentity().SigningKey {
			return fmt.Errorf("the homeserver has other keys for device %s than the ones in the store: another client uses this device "+
				"(the same access token somewhere else?); give opsbot a login of its own", cli.DeviceID)
		}
		return nil
	case onServer:
		return fmt.Errorf("the homeserver already has keys for device %s, made by another client: give opsbot a login of its own "+
			"(matrix.password, or an access token no other client uses)", cli.DeviceID)
	case shared:
		// The homeserver lost the keys (the device was deleted and its id
		// reused): start new ones, as a new device would.
		d.a.log.Warn("the homeserver no longer has this device's keys: making new ones", "device", cli.DeviceID)
		if _, err := keys.DB.Exec(ctx, `DELETE FROM crypto_account WHERE account_id=$1`, keys.AccountID); err != nil {
			return fmt.Errorf("drop the device's lost keys: %w", err)
		}
		if err := d.mach.Load(ctx); err != nil {
			return fmt.Errorf("make new keys for the device: %w", err)
		}
	}
	if err := d.mach.ShareKeys(ctx, -1); err != nil {
		return fmt.Errorf("upload the device's keys: %w", err)
	}
	d.a.log.Info("end-to-end encryption: device keys uploaded", "device", cli.DeviceID)
	return nil
}

// allowKeyShare answers a device's request for one of the bot's room keys:
// as mautrix does (to a device it was shared with, or one of the account's
// own trusted ones), and also to any device of a user joined to the room
// now when the room's members may read its whole history (history
// visibility "shared", the default, or "world_readable"). That is who the
// bot shares its keys with when it makes them; a key that did not reach a
// member's device (a new login, a lost to-device message) is then sent when
// their client asks, as Element does for a message it cannot read. Other
// users' devices, and any device in a room whose history is for members
// from when they joined, get the default answer.
func (d *olmDevice) allowKeyShare(def func(context.Context, *id.Device, event.RequestedKeyInfo) *crypto.KeyShareRejection) func(context.Context, *id.Device, event.RequestedKeyInfo) *crypto.KeyShareRejection {
	return func(ctx context.Context, dev *id.Device, req event.RequestedKeyInfo) *crypto.KeyShareRejection {
		rej := def(ctx, dev, req)
		if rej == nil || dev.UserID == d.cli.UserID || dev.Trust == id.TrustStateBlacklisted {
			return rej
		}
		sess, err := d.mach.CryptoStore.GetGroupSession(ctx, req.RoomID, req.SessionID)
		if err != nil || sess == nil || sess.SenderKey != d.mach.OwnIdentity().IdentityKey {
			return rej // not one of the bot's keys
		}
		if m, err := d.states.GetMembership(ctx, req.RoomID, dev.UserID); err != nil || m != event.MembershipJoin {
			return rej
		}
		vis, err := d.states.GetHistoryVisibility(ctx, req.RoomID)
		if err != nil || (vis != nil && vis.HistoryVisibility != event.HistoryVisibilityShared && vis.HistoryVisibility != event.HistoryVisibilityWorldReadable) {
			return rej
		}
		d.a.log.Info("sending a room key a member's device asked for", "room", req.RoomID, "user", dev.UserID, "device", dev.DeviceID)
		return nil
	}
}

// readRoom reads room's whole state (members, encryption) into the state
// store.
func (d *olmDevice) readRoom(ctx context.Context, room id.RoomID) error {
	if _, err := d.cli.State(ctx, room); err != nil {
		return err
	}
	d.roomsMu.Lock()
	d.rooms[room] = true
	d.roomsMu.Unlock()
	return nil
}

func (d *olmDevice) client() *mautrix.Client { return d.cli }
func (d *olmDevice) device() id.DeviceID     { return d.cli.DeviceID }
func (d *olmDevice) fingerprint() string     { return d.mach.OwnIdentity().SigningKey.Fingerprint() }

func (d *olmDevice) sync(ctx context.Context, resp *mautrix.RespSync, since string) {
	d.mach.ProcessSyncResponse(ctx, resp, since)
}

func (d *olmDevice) state(ctx context.Context, room id.RoomID, evt *event.Event) {
	switch evt.Type.Type {
	case event.StateMember.Type, event.StateEncryption.Type, event.StateHistoryVisibility.Type,
		event.StatePowerLevels.Type, event.StateCreate.Type, event.StateJoinRules.Type:
	default:
		return
	}
	evt.RoomID = room
	evt.Type.Class = event.StateEventType
	if evt.Content.Parsed == nil {
		if err := evt.Content.ParseRaw(evt.Type); err != nil {
			return
		}
	}
	mautrix.UpdateStateStore(ctx, d.states, evt)
	switch evt.Type {
	case event.StateMember:
		d.mach.HandleMemberEvent(ctx, evt)
	case event.StateHistoryVisibility:
		d.historyVisibility(ctx, evt)
	}
}

// historyVisibility drops the room's outbound group session when the
// room's history visibility changes what the session was shared for, so
// the next message starts a session shared under the new rule. It does
// what mautrix's OlmMachine.HandleHistoryVisibility does, except when the
// store cannot be read (in mautrix v0.33.0 that path dereferences a nil
// session and panics): then the session is dropped all the same, since
// a new session costs little and an over-shared one cannot be taken back.
func (d *olmDevice) historyVisibility(ctx context.Context, evt *event.Event) {
	vis, ok := evt.Content.Parsed.(*event.HistoryVisibilityEventContent)
	if !ok {
		return
	}
	sess, err := d.mach.CryptoStore.GetOutboundGroupSession(ctx, evt.RoomID)
	if err == nil && (sess == nil || sess.SharedHistory == nil || *sess.SharedHistory == vis.SharedHistory()) {
		return
	}
	if err := d.mach.CryptoStore.RemoveOutboundGroupSession(ctx, evt.RoomID); err != nil && ctx.Err() == nil {
		d.mach.Log.Warn().Err(err).Stringer("room_id", evt.RoomID).Msg("invalidating outbound group session after a history visibility change")
	}
}

func (d *olmDevice) encrypted(ctx context.Context, room id.RoomID) bool {
	enc, err := d.states.IsEncrypted(ctx, room)
	return err == nil && enc
}

// knowRoom reads room's state once before the device first sends to it,
// so that it is never sent to in the clear for want of knowing it is
// encrypted.
func (d *olmDevice) knowRoom(ctx context.Context, room id.RoomID) error {
	d.roomsMu.Lock()
	known := d.rooms[room]
	d.roomsMu.Unlock()
	if known {
		return nil
	}
	if err := d.readRoom(ctx, room); err != nil {
		return fmt.Errorf("matrix: read whether %s is encrypted before sending to it: %w", room, err)
	}
	return nil
}

func (d *olmDevice) decrypt(ctx context.Context, evt *event.Event) (*event.Event, error) {
	if evt.Content.Parsed == nil {
		if err := evt.Content.ParseRaw(event.EventEncrypted); err != nil {
			return nil, err
		}
	}
	out, err := d.mach.DecryptMegolmEvent(ctx, evt)
	if errors.Is(err, crypto.ErrNoSessionFound) {
		return nil, fmt.Errorf("%w: %w", errNoKeys, err)
	}
	return out, err
}

// awaitKeys waits for the room key of evt: a third of d, then it asks the
// sender's devices (and its own other devices) for the key and waits the
// rest.
func (d *olmDevice) awaitKeys(ctx context.Context, evt *event.Event, wait time.Duration) bool {
	c, ok := evt.Content.Parsed.(*event.EncryptedEventContent)
	if !ok {
		return false
	}
	if d.mach.WaitForSession(ctx, evt.RoomID, c.SenderKey, c.SessionID, wait/3) {
		return true
	}
	// Every device of the sender: the event's device_id is deprecated (and
	// the sender's other devices may hold the key too).
	d.RequestSession(ctx, evt.RoomID, c.SenderKey, c.SessionID, evt.Sender, "")
	return d.mach.WaitForSession(ctx, evt.RoomID, c.SenderKey, c.SessionID, wait-wait/3)
}

func (d *olmDevice) close() {
	d.mach.Destroy()
	d.db.Close()
}

// Init implements mautrix.CryptoHelper; startE2EE did the work.
func (d *olmDevice) Init(context.Context) error { return nil }

// Encrypt encrypts content for room with the device's outbound Megolm
// session, first sharing a new session with the room's members' devices
// when there is none (or it expired, or a member left). A membership change
// the sync handles between the share and the encryption discards the new
// session again (mautrix rotates it when members change): the share is then
// repeated, up to shareAttempts times.
func (d *olmDevice) Encrypt(ctx context.Context, room id.RoomID, typ event.Type, content any) (*event.EncryptedEventContent, error) {
	d.encMu.Lock()
	defer d.encMu.Unlock()
	const shareAttempts = 3
	for attempt := 1; ; attempt++ {
		enc, err := d.mach.EncryptMegolmEvent(ctx, room, typ, content)
		if err == nil || attempt > shareAttempts ||
			(!errors.Is(err, crypto.ErrSessionExpired) && !errors.Is(err, crypto.ErrNoGroupSession) && !errors.Is(err, crypto.ErrSessionNotShared)) {
			return enc, err
		}
		members, err := d.states.GetRoomJoinedOrInvitedMembers(ctx, room)
		if err != nil {
			return nil, fmt.Errorf("list the members of %s: %w", room, err)
		}
		if err := d.mach.ShareGroupSession(ctx, room, members); err != nil {
			return nil, fmt.Errorf("share a room key with the members of %s: %w", room, err)
		}
	}
}

// Decrypt implements mautrix.CryptoHelper.
func (d *olmDevice) Decrypt(ctx context.Context, evt *event.Event) (*event.Event, error) {
	return d.decrypt(ctx, evt)
}

// WaitForSession implements mautrix.CryptoHelper.
func (d *olmDevice) WaitForSession(ctx context.Context, room id.RoomID, key id.SenderKey, session id.SessionID, timeout time.Duration) bool {
	return d.mach.WaitForSession(ctx, room, key, session, timeout)
}

// RequestSession asks user's device (every device when device is empty)
// and the bot's own other devices for a room key.
func (d *olmDevice) RequestSession(ctx context.Context, room id.RoomID, key id.SenderKey, session id.SessionID, user id.UserID, device id.DeviceID) {
	if device == "" {
		device = "*"
	}
	err := d.mach.SendRoomKeyRequest(ctx, room, key, session, "", map[id.UserID][]id.DeviceID{user: {device}, d.cli.UserID: {"*"}})
	if err != nil && ctx.Err() == nil {
		d.a.log.Warn("ask for a missing room key", "room", room, "from", user, "err", err)
	}
}

// pickleKey is the key the device's secrets are sealed with in the store's
// tables: 32 random bytes made at the first start and kept in the store.
// It guards against reading keys out of one table row, not against someone
// who can read the whole store: the store file itself (0600) and its backups
// must be kept private.
func pickleKey(ctx context.Context, a *Adapter, st State) ([]byte, error) {
	k := pickleStateKey(a.cfg.UserID)
	v, err := st.SyncToken(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("read the key sealing the device's keys: %w", err)
	}
	if v != "" {
		return hex.DecodeString(v)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	// Two processes never race here: only the holder of the sync lease
	// starts encryption.
	if err := st.SetSyncToken(ctx, k, hex.EncodeToString(b)); err != nil {
		return nil, fmt.Errorf("keep the key sealing the device's keys: %w", err)
	}
	return b, nil
}

// zerologTo passes mautrix's warnings and errors on to the adapter's logger.
func zerologTo(log *slog.Logger) zerolog.Logger {
	return zerolog.New(slogWriter{log}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
}

type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	var line map[string]any
	if json.Unmarshal(p, &line) != nil {
		w.log.Warn("mautrix", "line", string(p))
		return len(p), nil
	}
	msg, _ := line["message"].(string)
	lvl := slog.LevelWarn
	if l, _ := line["level"].(string); l == "error" || l == "fatal" || l == "panic" {
		lvl = slog.LevelError
	}
	args := make([]any, 0, 2*len(line))
	for k, v := range line {
		if k != "message" && k != "level" && k != "time" {
			args = append(args, k, v)
		}
	}
	w.log.Log(context.Background(), lvl, "mautrix crypto: "+msg, args...)
	return len(p), nil
}

// PrepareStore creates (or upgrades) in st the tables the adapter keeps
// through KeyDB, the room state and the encryption keys, empty, as the
// adapter's first encrypted start would: `opsbot store copy` calls it on
// its target so that the keys can be copied into it.
func PrepareStore(ctx context.Context, st KeyDB) error {
	db, dialect, err := st.SideDB()
	if err != nil {
		return err
	}
	defer db.Close()
	dbu, err := dbutil.NewWithDB(db, dialect)
	if err != nil {
		return err
	}
	nop := zerolog.Nop()
	if err := sqlstatestore.NewSQLStateStore(dbu, dbutil.ZeroLogger(nop), false).Upgrade(ctx); err != nil {
		return fmt.Errorf("prepare the room state tables in %s: %w", st.Name(), err)
	}
	if err := crypto.NewSQLCryptoStore(dbu, dbutil.ZeroLogger(nop), "", "", nil).DB.Upgrade(ctx); err != nil {
		return fmt.Errorf("prepare the key tables in %s: %w", st.Name(), err)
	}
	return nil
}
