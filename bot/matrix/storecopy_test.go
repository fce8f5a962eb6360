//go:build goolm

package matrix_test

import (
	"context"
	"path/filepath"
	"testing"

	"go.mau.fi/util/dbutil"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
	"maunium.net/go/mautrix/sqlstatestore"

	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/internal/pgtest"
	"github.com/opsbot/opsbot/store"
)

type matrixTables struct {
	keys   *crypto.SQLCryptoStore
	states *sqlstatestore.SQLStateStore
}

// openTables opens the adapter's tables in st as the adapter does.
func openTables(t *testing.T, st *store.Store) matrixTables {
	t.Helper()
	db, dialect, err := st.SideDB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	dbu, err := dbutil.NewWithDB(db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	return matrixTables{
		keys:   crypto.NewSQLCryptoStore(dbu, nil, "@opsbot:hs/DEV", "DEV", []byte("pickle key")),
		states: sqlstatestore.NewSQLStateStore(dbu, nil, false),
	}
}

// The Matrix adapter's device keys and room state move with `opsbot store
// copy`, from SQLite to PostgreSQL and back: the copy is the same device
// (the same identity key) with the same rooms known as encrypted.
func TestStoreCopyMovesTheDevice(t *testing.T) {
	t.Parallel()
	pgtest.Skip(t)
	ctx := context.Background()
	open := func(c store.Config) *store.Store {
		st, err := store.OpenConfig(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	lite := open(store.Config{Path: filepath.Join(t.TempDir(), "opsbot.db")})
	if err := matrix.PrepareStore(ctx, lite); err != nil {
		t.Fatal(err)
	}
	src := openTables(t, lite)
	acc := crypto.NewOlmAccount()
	acc.Shared = true
	if err := src.keys.PutAccount(ctx, acc); err != nil {
		t.Fatal(err)
	}
	room, user := id.RoomID("!ops:hs"), id.UserID("@alice:hs")
	if err := src.states.SetMembership(ctx, room, user, event.MembershipJoin); err != nil {
		t.Fatal(err)
	}
	if err := src.states.SetEncryptionEvent(ctx, room, &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}); err != nil {
		t.Fatal(err)
	}

	pg := open(store.Config{Driver: "postgres", URL: pgtest.Database(t)})
	back := open(store.Config{Path: filepath.Join(t.TempDir(), "back.db")})
	for _, hop := range []struct{ from, to *store.Store }{{lite, pg}, {pg, back}} {
		if err := matrix.PrepareStore(ctx, hop.to); err != nil {
			t.Fatal(err)
		}
		if res, err := store.Copy(ctx, hop.from, hop.to, store.CopyOptions{}); err != nil {
			t.Fatalf("copy %s to %s: %v", hop.from.Name(), hop.to.Name(), err)
		} else if len(res.Skipped) != 3 {
			t.Errorf("copy to %s skipped %v, want only owners, leases and cancel requests", hop.to.Driver(), res.Skipped)
		}
		dst := openTables(t, hop.to)
		got, err := dst.keys.GetAccount(ctx)
		if err != nil || got == nil || got.IdentityKey() != acc.IdentityKey() || !got.Shared {
			t.Fatalf("the device in the %s copy: %v, %v; want identity key %s, shared", hop.to.Driver(), got, err, acc.IdentityKey())
		}
		if m, err := dst.states.GetMembership(ctx, room, user); err != nil || m != event.MembershipJoin {
			t.Errorf("membership in the %s copy: %q, %v", hop.to.Driver(), m, err)
		}
		if enc, err := dst.states.IsEncrypted(ctx, room); err != nil || !enc {
			t.Errorf("room encrypted in the %s copy: %v, %v", hop.to.Driver(), enc, err)
		}
	}
}
