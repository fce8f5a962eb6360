package matrix_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chattest"
	"github.com/opsbot/opsbot/internal/dendritetest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// matrixChat drives the conformance suite through a real Dendrite: alice
// (an operator), carol (another operator), dave (an operator of coder only)
// or bob (no role) types `!command` in the allowed room or in a room the
// bot is in but does not obey.
type matrixChat struct {
	e           *env
	in          *instance
	carol, dave *dendritetest.User // a second operator; an operator of coder only
}

// sentAt is a delivery as the bot's sync saw it: the sync position stored
// before it, from which a restarted sync delivers it again.
type sentAt struct{ since string }

func (m *matrixChat) Name() string        { return "matrix" }
func (m *matrixChat) Store() *store.Store { return m.in.app.Store }
func (m *matrixChat) HasRooms() bool      { return true }

func (m *matrixChat) syncKey() string { return "matrix/sync/" + string(m.e.botU.ID) }

func (m *matrixChat) Send(t testing.TB, as chattest.User, in chattest.Room, text string) chattest.Sent {
	u, room := map[chattest.User]*dendritetest.User{chattest.Operator: m.e.alice, chattest.NoRole: m.e.bob,
		chattest.Second: m.carol, chattest.Scoped: m.dave}[as], m.e.room
	if in == chattest.OffList {
		room = m.e.other
	}
	since, err := m.in.app.Store.SyncToken(context.Background(), m.syncKey())
	if err != nil {
		t.Fatal(err)
	}
	send(t, u, room, "!"+text)
	return sentAt{since}
}

// Said is every message and edit of the bot's in alice's view of the
// rooms: their plain bodies (an edit's new content).
func (m *matrixChat) Said(testing.TB) string {
	var b strings.Builder
	for _, e := range m.e.seen.All(func(e msg) bool { return e.Sender == m.e.botU.ID && e.Type == "m.room.message" }) {
		body := e.Body
		if e.NewBody != "" {
			body = e.NewBody
		}
		b.WriteString(body + "\n")
	}
	return b.String()
}

// Replay is a crash between handling a sync response and storing its
// position: the instance stops, its sync position goes back to before the
// delivery, and a new instance syncs it again. It returns once the new
// sync stored a position past it (the replayed events were handled).
func (m *matrixChat) Replay(t testing.TB, s chattest.Sent) bool {
	since := s.(sentAt).since
	m.in.stop()
	ctx := context.Background()
	if err := m.in.app.Store.SetSyncToken(ctx, m.syncKey(), since); err != nil {
		// The stopped instance's store is closed: write through a new one.
		st, oerr := store.Open(ctx, m.e.cfg.Store.Path)
		if oerr != nil {
			t.Fatal(oerr)
		}
		if err := st.SetSyncToken(ctx, m.syncKey(), since); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	m.in = m.e.start(nil)
	m.in.waitReady(t)
	testkit.WaitFor(t, 30*time.Second, "the replayed sync handled", func() bool {
		tok, err := m.in.app.Store.SyncToken(ctx, m.syncKey())
		return err == nil && tok != since
	})
	return true
}

// TestConformance: the chat conformance suite through a real Dendrite.
func TestConformance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := &matrixChat{e: e}
	ctx := testkit.Context(t, time.Minute)
	m.carol, m.dave = e.hs.Register(t, "carol"), e.hs.Register(t, "dave")
	for _, u := range []*dendritetest.User{m.carol, m.dave} {
		if _, err := e.alice.Client.InviteUser(ctx, e.room, &mautrix.ReqInviteUser{UserID: u.ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := u.Client.JoinRoomByID(ctx, e.room); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg.Auth.Users["matrix:"+string(m.carol.ID)] = config.RoleEverywhere("operator")
	e.cfg.Auth.Users["matrix:"+string(m.dave.ID)] = config.Grant{Roles: chattest.ScopedRoles}
	e.cfg.Auth.TwoPerson.Commands = []string{chattest.TwoPerson}
	m.in = e.start(nil)
	m.in.waitReady(t)
	testkit.WaitFor(t, 30*time.Second, "the first sync position stored", func() bool {
		tok, err := m.in.app.Store.SyncToken(context.Background(), m.syncKey())
		return err == nil && tok != ""
	})
	chattest.Run(t, m)
}
