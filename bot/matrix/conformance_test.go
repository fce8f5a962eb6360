package matrix_test

import (
	"context"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/chattest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// matrixChat drives the conformance suite through a real Dendrite: alice
// (an operator) or bob (no role) types `!command` in the allowed room or in
// a room the bot is in but does not obey.
type matrixChat struct {
	e  *env
	in *instance
}

// sentAt is a delivery as the bot's sync saw it: the sync position stored
// before it, from which a restarted sync delivers it again.
type sentAt struct{ since string }

func (m *matrixChat) Name() string        { return "matrix" }
func (m *matrixChat) Store() *store.Store { return m.in.app.Store }
func (m *matrixChat) HasRooms() bool      { return true }

func (m *matrixChat) syncKey() string { return "matrix/sync/" + string(m.e.botU.ID) }

func (m *matrixChat) Send(t testing.TB, as chattest.User, in chattest.Room, text string) chattest.Sent {
	u, room := m.e.alice, m.e.room
	if as == chattest.NoRole {
		u = m.e.bob
	}
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
	m := &matrixChat{e: e, in: e.start(nil)}
	m.in.waitReady(t)
	testkit.WaitFor(t, 30*time.Second, "the first sync position stored", func() bool {
		tok, err := m.in.app.Store.SyncToken(context.Background(), m.syncKey())
		return err == nil && tok != ""
	})
	chattest.Run(t, m)
}
