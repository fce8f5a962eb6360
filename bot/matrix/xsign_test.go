//go:build goolm

package matrix_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"maunium.net/go/mautrix/crypto/ssss"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/dendritetest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// strictEnv is an env whose only allowed room is encrypted, with alice's
// client behaving as Element does with "exclude insecure devices"; the bot
// is not started.
func strictEnv(t *testing.T) (*env, *dendritetest.E2EEMember, id.RoomID) {
	t.Helper()
	e := newEnv(t)
	alice := dendritetest.NewStrictE2EEMember(t, e.hs.Login(t, e.alice))
	room := e.encryptedRoom(t)
	return e, alice, room
}

// joined waits until the bot is in room.
func (e *env) joined(t *testing.T, room id.RoomID) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "the bot to join the encrypted room", func() bool {
		j, err := e.alice.Client.JoinedMembers(testkit.Context(t, 10*time.Second), room)
		return err == nil && hasMember(j, e.botU.ID)
	})
}

// countingTransport counts the requests that pass through it, and keeps
// their methods and paths.
type countingTransport struct {
	n     atomic.Int64
	mu    sync.Mutex
	paths []string
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.mu.Lock()
	c.paths = append(c.paths, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/_matrix/client"))
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countingTransport) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.paths, ", ")
}

// TestCrossSignedDevice: with matrix.encryption and matrix.password, the
// bot's first start creates the account's cross-signing keys, keeps their
// recovery key in the store and signs its device: a client that excludes
// insecure devices (as Element does from April 2026) shares its room keys
// with it, its encrypted `!mtp steps 10` runs, and it reads the bot's
// status, thread and final edit. A restart with the keys in place signs
// nothing again. A new store (a lost one, a second machine) without
// matrix.recovery_key is not signed and /readyz's reason says what to do;
// with the recovery key the store printed, the new device signs itself and
// the strict client reads it.
func TestCrossSignedDevice(t *testing.T) {
	t.Parallel()
	e, alice, room := strictEnv(t)
	first := &countingTransport{}
	e.http = &http.Client{Transport: first}
	begun := time.Now()
	in := e.start(nil)
	in.waitReady(t)
	t.Logf("figure: from the adapter's start to a synced, cross-signed device on Dendrite: %v (first start: keys made); %d requests: %s",
		time.Since(begun).Round(time.Millisecond), first.n.Load(), first)
	e.http = nil
	e.joined(t, room)

	botSaid := func(m msg) bool { return m.Sender == e.botU.ID && m.Room == room }
	cmd := alice.Send(t, room, "!mtp steps 10")
	root := alice.Seen.Wait(t, 60*time.Second, "the bot's encrypted answer to "+string(cmd), func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.ReplyTo == cmd && m.RelType == ""
	})
	if !strings.Contains(root.Body, "mtp steps 10") {
		t.Fatalf("root status: %+v", root)
	}
	alice.Seen.Wait(t, jobWait, "the final edit", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.RelType == "m.replace" && m.RelTo == root.ID && strings.HasPrefix(m.NewBody, "✅") &&
			strings.Contains(m.NewBody, "— succeeded")
	})
	alice.Seen.Wait(t, 30*time.Second, "the result in the thread", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.RelType == "m.thread" && m.RelTo == root.ID && strings.Contains(m.Body, "tok/s")
	})
	noInsecure(t, alice, e.botU.ID)

	st := e.openStore(t)
	rk, err := matrix.RecoveryKey(testkit.Context(t, 10*time.Second), st, string(e.botU.ID))
	if err != nil {
		t.Fatal(err)
	}
	// The kept recovery key opens the account's secret storage.
	ssm := ssss.NewSSSSMachine(e.botU.Client)
	keyID, meta, err := ssm.GetDefaultKeyData(testkit.Context(t, 10*time.Second))
	if err != nil {
		t.Fatalf("the account's default secret storage key: %v", err)
	}
	if _, err := meta.VerifyRecoveryKey(keyID, rk); err != nil {
		t.Fatalf("the recovery key kept in the store does not open the account's secret storage: %v", err)
	}

	// A restart with everything in place: the device is signed already.
	in.stop()
	count := &countingTransport{}
	e.http = &http.Client{Transport: count}
	in = e.start(nil)
	in.waitReady(t)
	t.Logf("figure: requests to the homeserver from the adapter's start to its first sync, keys in place: %d: %s", count.n.Load(), count)
	if strings.Contains(count.String(), "/keys/device_signing/upload") || strings.Contains(count.String(), "/keys/signatures/upload") ||
		strings.Contains(count.String(), "/account_data/") {
		t.Errorf("a start with the device signed signed again or read secret storage: %s", count)
	}
	in.stop()
	e.http = nil

	// A new store: a new device, which the account's keys must sign.
	e.cfg.Store.Path = filepath.Join(t.TempDir(), "opsbot.db")
	in = e.start(nil)
	testkit.WaitFor(t, 60*time.Second, "the unsigned device to say what to do", func() bool {
		err := in.adapter.Ready()
		return err != nil && strings.Contains(err.Error(), "not cross-signed") && strings.Contains(err.Error(), "matrix.recovery_key")
	})
	in.stop()
	e.cfg.Store.Path = filepath.Join(t.TempDir(), "opsbot.db")
	e.cfg.Matrix.RecoveryKey = config.Secret(rk)
	begun = time.Now()
	in = e.start(nil)
	in.waitReady(t)
	t.Logf("figure: from the adapter's start to a synced device signed from secret storage: %v", time.Since(begun).Round(time.Millisecond))
	show := alice.Send(t, room, "!mtp show")
	alice.Seen.Wait(t, 60*time.Second, "the new device's answer to `!mtp show`", func(m msg) bool {
		return botSaid(m) && m.Encrypted && m.ReplyTo == show
	})
	noInsecure(t, alice, e.botU.ID)
	devs, err := e.botU.Client.GetDevicesInfo(testkit.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs.Devices) < 4 { // the test's login, and three stores' devices
		t.Errorf("the bot's account has %d devices, want a new one per store: %+v", len(devs.Devices), devs.Devices)
	}
}

// noInsecure fails when the strict client refused a message of u's.
func noInsecure(t *testing.T, m *dendritetest.E2EEMember, u id.UserID) {
	t.Helper()
	for _, ev := range m.Seen.All(func(ev msg) bool { return ev.Sender == u && ev.Type == dendritetest.Undecryptable }) {
		t.Errorf("the strict client did not read the bot's message: %s", ev.Body)
	}
}

// TestUnsignedDeviceExcluded: a bot whose device is not cross-signed (here:
// an access token and no password to make the account's keys with, no
// recovery key) says so in Ready, with what to do, and a client that
// excludes insecure devices neither shares its room key with it (the
// encrypted command is not run) nor reads what it says.
func TestUnsignedDeviceExcluded(t *testing.T) {
	t.Parallel()
	e, alice, room := strictEnv(t)
	login := e.hs.Login(t, e.botU)
	e.cfg.Matrix.Password, e.cfg.Matrix.AccessToken = "", config.Secret(login.Client.AccessToken)
	e.keyWait = 1500 * time.Millisecond
	in := e.start(nil)
	testkit.WaitFor(t, 60*time.Second, "Ready to report the unsigned device", func() bool {
		err := in.adapter.Ready()
		return err != nil && strings.Contains(err.Error(), "not cross-signed") && strings.Contains(err.Error(), "matrix.password")
	})
	e.joined(t, room)

	cmd := alice.Send(t, room, "!mtp steps 10")
	refused := alice.Seen.Wait(t, 60*time.Second, "the strict client to refuse the bot's answer", func(m msg) bool {
		return m.Sender == e.botU.ID && m.Room == room && m.Type == dendritetest.Undecryptable
	})
	if !strings.Contains(refused.Body, dendritetest.InsecureSender) {
		t.Errorf("the bot's message: %+v; want it refused as from an insecure device", refused)
	}
	if read := alice.Seen.All(func(m msg) bool { return m.Sender == e.botU.ID && m.Encrypted }); len(read) > 0 {
		t.Errorf("the strict client read the unsigned bot's messages: %+v", read)
	}
	testkit.WaitFor(t, 30*time.Second, "the command audited as undecryptable", func() bool {
		rows, err := in.app.Store.Audit(context.Background(), store.AuditFilter{User: string(e.alice.ID)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Decision == "undecryptable" {
				return true
			}
		}
		return false
	})
	jobs, err := in.app.Store.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 0 {
		t.Errorf("jobs: %+v; the command %s must not have run", jobs, cmd)
	}
}
