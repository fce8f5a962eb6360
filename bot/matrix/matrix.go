// Package matrix is the Matrix chat adapter (mautrix-go): an on-call room
// types `!mtp steps 10`, the bot answers with one status message that it
// edits in place and a thread of steps under it.
//
// Like every adapter it only translates: commands go to bot.Inbound as
// Requests of platform "matrix" (User is the sender's Matrix id, never a
// display name; Room the room id; ReplyTo the command's event id), and
// reactions and `!confirm TOKEN` go back as the actions the bot offered.
//
// # What it does
//
//   - Login: with matrix.access_token as given, or with matrix.password once:
//     the device id and access token it gets are kept in the store and used
//     again at the next start (a new login only when the homeserver no
//     longer accepts them). Chat calls made before Run has logged in (the
//     bot reports interrupted jobs as it starts) use those credentials.
//   - Rooms: it joins the rooms of matrix.rooms at start, and a room it is
//     invited to when the door admits it (the room is in matrix.rooms); an
//     invite to any other room is declined (the door audits it), and a
//     command typed in a room outside the list gets no answer (the door
//     refuses and audits it).
//   - Messages: a command is an m.text message whose body starts with `!`.
//     Its own events, edits of messages and other message types are ignored.
//   - Status: a job's root message is an m.notice (HTML with a plain-text
//     body) answering the command, edited in place with m.replace; step
//     lines and the result are m.thread replies under it, the outcome a
//     reaction on it; charts are m.image, output longer than 16 KiB an
//     m.file.
//   - Confirmation: reacting ✅ on the bot's preview confirms it (❌ aborts);
//     typing `!confirm TOKEN` does the same. `!cancel JOB` cancels a job.
//
// # Roles from power levels
//
// With matrix.power_levels ({operator: 50, admin: 100}) a sender's power
// level in the room of a command or a reaction grants a role there (the
// Adapter is the bot's bot.RoomLevels; the bot decides). The adapter reads
// each allowed room's m.room.power_levels when its sync starts and follows
// the state events of the sync in timeline order, so a change by the room's
// admins applies to the next command without a restart, and a level in one
// room grants nothing in another. Roles go by user id, never display name.
//
// # Restarts and the replay rule
//
// The sync token is persisted in the store after each sync response has
// been handled, so a restart resumes where the last one stopped: nothing is
// replayed and commands sent while no opsbot was syncing are delivered then.
// Such a command is run only when it is at most matrix.stale_after old
// (default 5m) when first seen; an older one is answered "stale, not run"
// and the sender may send it again. On the very first start (no token in the
// store) the room history is skipped: only commands sent after it count.
// The door (bot.Inbound) claims every command's event id in the store
// before it acts, so an event delivered twice (a crash between handling a response and
// storing its token, a takeover) is acted on once.
//
// # What it keeps, and where
//
// The adapter keeps nothing of its own and decides nothing: every event it
// reads (a command, a reaction, an invite, an encrypted message it cannot
// read) goes to the door, which claims, admits and audits it. What it keeps
// across restarts (its login, its sync position, the key sealing its
// device's keys) is in the bot's store, reached through State; its sync
// lease is held with the runtime's one locker (Locker); mautrix's own
// tables are reached through KeyDB. `opsbot serve` hands those in with
// Attach, once the bot has opened its store and before anything is posted.
//
// # Two opsbot processes on one store
//
// Only one process syncs an account: it holds the lease
// "matrix-sync:USER" of the runtime's locker (renewed every
// limits.lease_ttl/3). Another process stands by (Ready says so, and its
// Chat still posts its own jobs' threads) and takes the sync over when the
// holder stops or dies (after the lease's expiry, or at once when its bot
// sees the holder's pid gone on the same machine).
//
// # End-to-end encryption
//
// With matrix.encryption: true (in a build with -tags goolm: mautrix's
// pure-Go Olm, so the binary stays CGO_ENABLED=0; other builds refuse the
// key) the bot is a device with keys of its own and works in encrypted rooms
// as in others: commands are decrypted, replies, edits and thread lines
// encrypted, charts and files uploaded encrypted (reactions stay in the
// clear, as the spec has them). Its keys and what it knows of the rooms'
// members are kept in the store's file, in mautrix's own tables (crypto_*,
// mx_*), through the same pure-Go SQLite driver; a random key kept in the
// store seals the secrets among them, so the store and its backups must stay
// private. Room keys are shared with every device of the room's members,
// verified or not: who may run what is decided by user id, as in the clear.
//
// The device is cross-signed by its account (xsign.go), as clients that
// exclude insecure devices (Element from April 2026, MSC4153) require: at
// its first encrypted start the adapter makes the account's cross-signing
// keys when it has none (user-interactive auth with matrix.password), keeps
// them in the account's secret storage under a new recovery key, keeps that
// key sealed in the store (RecoveryKey reads it) and signs the device; a
// new device of an account with keys fetches them with matrix.recovery_key.
// A device left unsigned is a reason of Ready.
//
// Only the process that holds the sync lease has the keys in use (two
// processes ratcheting one device's sessions would break them). A standby
// process sends to rooms without encryption only: a message it would post
// to an encrypted room is refused (and logged), never sent in the clear.
//
// An encrypted command whose room key has not arrived is kept aside while the
// sync goes on, the key is asked for from the sender's devices, and the
// command is run when the key comes (within KeyWait, 30 s by default). If it
// does not come, or the event cannot be decrypted at all, the sender gets a
// notice saying that nothing was run and how to let the bot read their
// messages (at most one per sender and room every 10 minutes); the event is
// audited as undecryptable (by the door). A command kept aside when its
// process stops is not run by the next holder (its sync position has moved
// on); its sender gets no answer and sends it again. Without
// matrix.encryption an encrypted event is audited as undecryptable too, and
// answered in an allowed room with a notice that the bot cannot read it.
// An encrypted event in a room outside matrix.rooms is read when its key is
// at hand (and then taken as any other event there), and otherwise goes to
// the door unread, which refuses and audits it: no answer, no key asked for.
package matrix

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
)

// Platform is the adapter's name and its users' auth key prefix:
// auth.users["matrix:@alice:example.org"].
const Platform = "matrix"

// EditInterval is the least time between two updates of a job's status
// message: step lines and edits in between are coalesced by the bot.
const EditInterval = time.Second

// maxInline is the longest text sent as a message; longer output is
// attached as an m.file.
const maxInline = 16 << 10

// Options are what New needs besides the matrix section.
type Options struct {
	Logger *slog.Logger
	// HTTPClient, when set, makes every request to the homeserver (tests
	// count them); by default mautrix's own client.
	HTTPClient *http.Client
}

// State keeps the adapter's own values across restarts and processes: its
// login, its sync position, the key sealing its device's keys. The bot's
// store implements it (store.Store); a key never written reads "" and a nil
// error.
type State interface {
	SyncToken(ctx context.Context, key string) (string, error)
	SetSyncToken(ctx context.Context, key, value string) error
}

// Locker holds a key across the opsbot processes that share the store: the
// runtime's one locker (leases.Leases, App.Leases), as for services and the
// scheduler. Lock blocks until the key is held or ctx ends; the hold is
// marked lost when another process took it over or the locker closed.
type Locker interface {
	Lock(ctx context.Context, key string, onWait func(holder string)) (*bot.Hold, error)
}

// KeyDB is the database mautrix's own tables live in (the device's keys, the
// rooms' state), in the store's file: SideDB opens a handle of its own on
// it, which the caller closes, and names its dialect as mautrix's dbutil
// does ("sqlite3", "postgres"); Name says which database it is, for people.
// The bot's store implements it (store.Store).
type KeyDB interface {
	SideDB() (*sql.DB, string, error)
	Name() string
}

// Deps are what the adapter keeps in the bot's store and holds with the
// runtime's locker; Attach hands them in.
type Deps struct {
	State  State  // required
	Locker Locker // required to Run
	Keys   KeyDB  // required to Run with matrix.encryption
}

// Adapter is the Matrix chat platform. Create it with New, hand it to the
// bot as its "matrix" Chat, Attach the bot's store and locker once the bot
// opened them, then Run it. Safe for concurrent use.
type Adapter struct {
	cfg     config.Matrix
	log     *slog.Logger
	http    *http.Client // Options.HTTPClient
	allowed map[id.RoomID]bool
	user    id.UserID

	deps atomic.Pointer[Deps] // set by Attach

	// client is set once Run has logged in, or by conn from the kept
	// credentials before.
	client atomic.Pointer[mautrix.Client]
	connMu sync.Mutex
	ready  atomic.Pointer[string] // why not ready; nil when ready
	// trust is why the device is not cross-signed (with matrix.encryption,
	// while this process syncs); nil when it is, or without encryption.
	trust atomic.Pointer[string]

	mu    sync.Mutex
	roots map[id.EventID]id.EventID // thread replies -> their root
	last  map[id.EventID]id.EventID // thread root -> latest reply in it
	shown map[id.EventID]string     // status message -> the text it shows now

	toldUndecryptable map[string]time.Time // "room sender" -> last "cannot decrypt" notice
	encryptedRooms    map[id.RoomID]bool   // rooms a standby found encrypted (it never sends there)

	levelsMu sync.RWMutex
	levels   map[id.RoomID]powerLevels // allowed rooms' power levels (matrix.power_levels)

	// Now is the clock of the undecryptable notices' pacing (the stale rule is
	// the door's: bot.AppOptions.Now); tests may set it before Run.
	Now func() time.Time
	// KeyWait is how long an encrypted command waits for its room key
	// (DefaultKeyWait); tests may set it before Run.
	KeyWait time.Duration
}

// preview is a confirmation the bot asked in a room.
var (
	_ bot.Adapter = (*Adapter)(nil)
	_ bot.Pacer   = (*Adapter)(nil)
)

// New checks cfg and returns an adapter that has not connected yet (Run
// does). It fails on what the config check should have caught: no
// homeserver, user id, credentials or rooms, or encryption asked of a build without it.
func New(cfg config.Matrix, o Options) (*Adapter, error) {
	var problems []string
	if u, err := url.Parse(cfg.Homeserver); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problems = append(problems, "matrix.homeserver must be the homeserver's http(s) URL")
	}
	if _, _, err := id.UserID(cfg.UserID).Parse(); err != nil {
		problems = append(problems, fmt.Sprintf("matrix.user_id %q is not a Matrix user id (@name:server)", cfg.UserID))
	}
	if cfg.AccessToken == "" && cfg.Password == "" {
		problems = append(problems, "matrix.access_token or matrix.password is required")
	}
	if len(cfg.Rooms) == 0 {
		problems = append(problems, "matrix.rooms must list the rooms the bot obeys")
	}
	if cfg.Encryption && !config.MatrixEncryptionBuilt {
		problems = append(problems, "matrix.encryption: end-to-end encryption is not in this build of opsbot (build it with -tags goolm)")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("matrix adapter: %s", strings.Join(problems, "; "))
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = config.Duration(config.DefaultMatrixStaleAfter)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	a := &Adapter{cfg: cfg, log: log.With("platform", Platform), allowed: map[id.RoomID]bool{}, http: o.HTTPClient,
		user:  id.UserID(cfg.UserID),
		roots: map[id.EventID]id.EventID{}, last: map[id.EventID]id.EventID{},
		shown: map[id.EventID]string{}, levels: map[id.RoomID]powerLevels{}, Now: time.Now, KeyWait: DefaultKeyWait,
		toldUndecryptable: map[string]time.Time{}, encryptedRooms: map[id.RoomID]bool{}}
	for _, r := range cfg.Rooms {
		a.allowed[id.RoomID(r)] = true
	}
	a.setNotReady("connecting to " + cfg.Homeserver)
	return a, nil
}

// Platform is "matrix".
func (a *Adapter) Platform() string { return Platform }

// Attach hands the adapter what it keeps in the bot's store and the
// runtime's locker: call it once the store is open (bot.AppOptions.Opened),
// before the bot posts anything and before Run. Chat calls made before it
// can use only matrix.access_token.
func (a *Adapter) Attach(d Deps) { a.deps.Store(&d) }

// errNoStore: Run without Attach.
var errNoStore = errors.New("matrix adapter: the store is required (the adapter keeps its login and sync token there): " +
	"Attach the bot's store and locker before Run")

// attached returns what Attach handed in, checked for Run.
func (a *Adapter) attached() (*Deps, error) {
	d := a.deps.Load()
	if d == nil || d.State == nil || d.Locker == nil {
		return nil, errNoStore
	}
	if a.cfg.Encryption && d.Keys == nil {
		return nil, fmt.Errorf("matrix adapter: matrix.encryption keeps the device's keys in the store: Attach its KeyDB before Run")
	}
	return d, nil
}

// EditInterval implements bot.Pacer.
func (a *Adapter) EditInterval() time.Duration { return EditInterval }

// Ready returns nil while this process syncs the account and takes
// commands; else why not: connecting, standing by for another process, the
// sync failing, or (with matrix.encryption) its device not cross-signed, so
// that clients excluding insecure devices cannot talk to it.
func (a *Adapter) Ready() error {
	if why := a.ready.Load(); why != nil {
		return errors.New(*why)
	}
	if why := a.trust.Load(); why != nil {
		return errors.New("end-to-end encryption: the device is not cross-signed (clients that exclude insecure devices ignore it): " + *why)
	}
	return nil
}

func (a *Adapter) setNotReady(why string) { a.ready.Store(&why) }
func (a *Adapter) setReady()              { a.ready.Store(nil) }

// Run logs in, joins the allowed rooms, waits for the sync lease and syncs
// until ctx ends, handing every event to in. A homeserver that does not
// answer and a failing sync are retried with backoff (Ready says why
// meanwhile). It returns nil after ctx ends or once the runtime's locker
// closed (the bot stops), and an error only when it cannot serve at all:
// nothing was attached (Attach), or the homeserver refuses the credentials
// (or they are another account's).
func (a *Adapter) Run(ctx context.Context, in bot.Inbound) error {
	defer a.setNotReady("stopped")
	deps, err := a.attached()
	if err != nil {
		return err
	}
	var cli *mautrix.Client
	for backoff := time.Second; ; backoff = min(2*backoff, time.Minute) {
		cli, err = a.login(ctx, deps.State)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			break
		}
		a.setNotReady("login failed: " + err.Error())
		if refused(err) {
			return err
		}
		// The homeserver is down or unreachable: try again.
		a.log.Warn("log in to the homeserver; retrying", "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	a.client.Store(cli)
	// The sync is held with the runtime's one locker (store leases), as
	// services and the scheduler are: one process syncs, others stand by.
	s := &syncer{a: a, state: deps.State, keys: deps.Keys, cli: cli, in: in}
	for {
		a.setNotReady("standing by: waiting for the matrix sync lease")
		hold, err := deps.Locker.Lock(ctx, a.syncLeaseKey(), func(holder string) {
			a.setNotReady("standing by: " + holder + " syncs " + a.cfg.UserID)
			a.log.Info("standing by: another opsbot process syncs this account", "holder", holder)
		})
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, bot.ErrLeasesClosed) {
			return a.stopped(ctx)
		}
		if err != nil {
			return fmt.Errorf("matrix: %w", err)
		}
		a.log.Info("syncing", "user", a.cfg.UserID, "epoch", hold.Epoch)
		s.run(ctx, hold)
		hold.Release()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(hold.Check(), bot.ErrLeasesClosed) {
			return a.stopped(ctx)
		}
		// The lease was lost: stand by again.
	}
}

// stopped waits, syncing nothing, for Run's ctx to end once the runtime's
// locker closed (the bot stops: its jobs have ended), and returns nil.
func (a *Adapter) stopped(ctx context.Context) error {
	a.setNotReady("stopped: opsbot is stopping")
	<-ctx.Done()
	return nil
}

// errWrongUser is wrapped when the credentials are another account's.
var errWrongUser = errors.New("the credentials belong to another account")

// refused reports whether the homeserver refused the credentials (trying
// again cannot help), as opposed to not answering.
func refused(err error) bool {
	return errors.Is(err, errWrongUser) || errors.Is(err, mautrix.MForbidden) || errors.Is(err, mautrix.MUnknownToken) ||
		errors.Is(err, mautrix.MUserDeactivated) || errors.Is(err, mautrix.MMissingToken) || errors.Is(err, mautrix.MInvalidParam)
}

// savedLogin is what a password login leaves in the store.
type savedLogin struct {
	Homeserver  string `json:"homeserver"`
	DeviceID    string `json:"device_id"`
	AccessToken string `json:"access_token"`
}

func (a *Adapter) loginKey() string     { return "matrix/login/" + a.cfg.UserID }
func (a *Adapter) syncTokenKey() string { return "matrix/sync/" + a.cfg.UserID }
func (a *Adapter) syncLeaseKey() string { return "matrix-sync:" + a.cfg.UserID }

// login returns a client with working credentials: the configured access
// token, else the login kept in the store, else a new password login (kept
// for the next start).
func (a *Adapter) login(ctx context.Context, st State) (*mautrix.Client, error) {
	cli, err := a.newClient("")
	if err != nil {
		return nil, fmt.Errorf("matrix homeserver %s: %w", a.cfg.Homeserver, err)
	}
	if tok := a.cfg.AccessToken.Value(); tok != "" {
		cli.AccessToken = tok
		return cli, a.whoami(ctx, cli)
	}
	s, err := a.readLogin(ctx, st)
	if err != nil {
		return nil, err
	}
	if s.AccessToken != "" {
		cli.AccessToken, cli.DeviceID = s.AccessToken, id.DeviceID(s.DeviceID)
		err := a.whoami(ctx, cli)
		if err == nil {
			a.log.Info("logged in with the kept login", "device", s.DeviceID)
			return cli, nil
		}
		if !errors.Is(err, mautrix.MUnknownToken) {
			return nil, err
		}
		a.log.Info("the kept login is no longer valid: logging in again", "device", s.DeviceID)
		cli.AccessToken = ""
	}
	return cli, a.passwordLogin(ctx, st, cli)
}

func (a *Adapter) passwordLogin(ctx context.Context, st State, cli *mautrix.Client) error {
	resp, err := cli.Login(ctx, &mautrix.ReqLogin{
		Type:                     mautrix.AuthTypePassword,
		Identifier:               mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: a.cfg.UserID},
		Password:                 a.cfg.Password.Value(),
		DeviceID:                 cli.DeviceID,
		InitialDeviceDisplayName: "opsbot",
		StoreCredentials:         true,
	})
	if err != nil {
		return fmt.Errorf("matrix: log in as %s on %s with matrix.password: %w", a.cfg.UserID, a.cfg.Homeserver, err)
	}
	if resp.UserID != a.user {
		return fmt.Errorf("matrix: logged in as %s, but matrix.user_id is %s: %w", resp.UserID, a.cfg.UserID, errWrongUser)
	}
	b, _ := json.Marshal(savedLogin{Homeserver: a.cfg.Homeserver, DeviceID: string(resp.DeviceID), AccessToken: resp.AccessToken})
	if err := st.SetSyncToken(ctx, a.loginKey(), string(b)); err != nil {
		return fmt.Errorf("matrix: keep the login in the store: %w", err)
	}
	a.log.Info("logged in with the password; login kept in the store", "device", resp.DeviceID)
	return nil
}

func (a *Adapter) whoami(ctx context.Context, cli *mautrix.Client) error {
	who, err := cli.Whoami(ctx)
	if err != nil {
		return fmt.Errorf("matrix: check the access token of %s on %s: %w", a.cfg.UserID, a.cfg.Homeserver, err)
	}
	if who.UserID != a.user {
		return fmt.Errorf("matrix: the access token belongs to %s, but matrix.user_id is %s: %w", who.UserID, a.cfg.UserID, errWrongUser)
	}
	if cli.DeviceID == "" {
		cli.DeviceID = who.DeviceID
	}
	return nil
}

// newClient is a client of the homeserver as the bot's user.
func (a *Adapter) newClient(token string) (*mautrix.Client, error) {
	cli, err := mautrix.NewClient(a.cfg.Homeserver, a.user, token)
	if err == nil && a.http != nil {
		cli.Client = a.http
	}
	return cli, err
}

// conn returns the client Chat calls use. Before Run has logged in (the
// bot reports the jobs a stopped process left as interrupted while it
// starts, before Run) it is made from the configured access token or the
// login kept in the store, without asking the homeserver.
func (a *Adapter) conn(ctx context.Context) (*mautrix.Client, error) {
	if cli := a.client.Load(); cli != nil {
		return cli, nil
	}
	a.connMu.Lock()
	defer a.connMu.Unlock()
	if cli := a.client.Load(); cli != nil {
		return cli, nil
	}
	cli, err := a.newClient(a.cfg.AccessToken.Value())
	if err != nil {
		return nil, fmt.Errorf("matrix homeserver %s: %w", a.cfg.Homeserver, err)
	}
	if cli.AccessToken == "" {
		s, err := a.keptLogin(ctx)
		if err != nil {
			return nil, err
		}
		if s.AccessToken == "" {
			return nil, errors.New("matrix: not logged in yet")
		}
		cli.AccessToken, cli.DeviceID = s.AccessToken, id.DeviceID(s.DeviceID)
	}
	a.client.CompareAndSwap(nil, cli)
	return a.client.Load(), nil
}

// keptLogin reads the login a password login left in the store, if it
// is for this homeserver.
func (a *Adapter) keptLogin(ctx context.Context) (savedLogin, error) {
	d := a.deps.Load()
	if d == nil || d.State == nil {
		return savedLogin{}, errors.New("matrix: not logged in yet (the bot's store is not attached)")
	}
	return a.readLogin(ctx, d.State)
}

func (a *Adapter) readLogin(ctx context.Context, st State) (savedLogin, error) {
	raw, err := st.SyncToken(ctx, a.loginKey())
	if err != nil {
		return savedLogin{}, fmt.Errorf("matrix: read the kept login: %w", err)
	}
	var s savedLogin
	if raw == "" || json.Unmarshal([]byte(raw), &s) != nil || s.Homeserver != a.cfg.Homeserver {
		return savedLogin{}, nil
	}
	return s, nil
}
