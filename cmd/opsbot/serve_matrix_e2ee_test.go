//go:build goolm

package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"maunium.net/go/mautrix/crypto/ssss"

	"github.com/opsbot/opsbot/internal/dendritetest"
)

// TestServeMatrixEncrypted: `opsbot serve --lab` with matrix.encryption, as
// a process of its own, in an encrypted room of a real Dendrite: alice's
// client (which encrypts, and excludes insecure devices, as Element does
// from April 2026) sends `!mtp steps 10`; serve has cross-signed its device
// (the account had no keys: it made them), so the bot's answer, its edits
// up to succeeded and the result in the thread reach her encrypted, and
// she reads them. The keys are in serve's store: after a restart the same
// device reads her `!jobs all` and answers it. `opsbot matrix recovery-key`
// prints the recovery key that opens the account's secret storage.
func TestServeMatrixEncrypted(t *testing.T) {
	t.Parallel()
	m := newMatrixRig(t)
	alice := dendritetest.NewStrictE2EEMember(t, m.alice)
	m.room = dendritetest.CreateEncryptedRoom(t, m.alice, m.bot.ID)
	m.writeConfig(t, "  encryption: true\n")
	begun := time.Now()
	p, _ := m.serve(t)
	t.Logf("figure: from serve's start to /readyz 200 with a cross-signed device on Dendrite (keys made at this start): %v",
		time.Since(begun).Round(time.Millisecond))
	if !strings.Contains(p.out.String(), "created the account's cross-signing keys") {
		t.Errorf("serve did not say it made the cross-signing keys:\n%s", p.out.String())
	}
	seen := &roomWatcher{alice.Seen}
	pollServe(t, p, time.Minute, "the bot to join the encrypted room", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		j, err := m.alice.Client.JoinedMembers(ctx, m.room)
		if err != nil {
			return false
		}
		_, ok := j.Joined[m.bot.ID]
		return ok
	})

	fromBot := func(e roomEvent) bool { return e.Sender == m.bot.ID && e.Room == m.room && e.Encrypted }
	cmd := alice.Send(t, m.room, "!mtp steps 10")
	root := seen.wait(t, p, time.Minute, "the bot's encrypted answer", func(e roomEvent) bool {
		return fromBot(e) && e.ReplyTo == cmd && e.RelType == ""
	})
	if root.MsgType != "m.notice" || !strings.Contains(root.Body, "mtp steps 10") {
		t.Fatalf("root status: %+v", root)
	}
	final := seen.wait(t, p, 2*time.Minute, "the final edit", func(e roomEvent) bool {
		return fromBot(e) && e.RelType == "m.replace" && e.RelTo == root.ID && strings.Contains(e.NewBody, "— succeeded")
	})
	if !strings.HasPrefix(final.NewBody, "✅") || !strings.Contains(final.NewBody, "tok/s") {
		t.Errorf("final status: %q", final.NewBody)
	}
	seen.wait(t, p, 30*time.Second, "the result in the thread", func(e roomEvent) bool {
		return fromBot(e) && e.RelType == "m.thread" && e.RelTo == root.ID && strings.Contains(e.Body, "Result of #1") &&
			strings.Contains(e.Body, "tok/s") && strings.Contains(e.Body, "accept")
	})
	for _, e := range seen.all(func(e roomEvent) bool { return e.Sender == m.bot.ID && e.Type == "m.room.message" && !e.Encrypted }) {
		t.Errorf("serve sent a message in the clear to the encrypted room: %+v", e)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
	rk := spawn(t, context.Background(), m.env, "matrix", "recovery-key", "--config", m.config)
	if code := rk.wait(t, time.Minute); code != 0 {
		t.Fatalf("opsbot matrix recovery-key: exit %d\n%s", code, rk.out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keyID, meta, err := ssss.NewSSSSMachine(m.bot.Client).GetDefaultKeyData(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := meta.VerifyRecoveryKey(keyID, strings.TrimSpace(rk.stdout.String())); err != nil {
		t.Errorf("opsbot matrix recovery-key printed %q, which does not open the account's secret storage: %v", rk.stdout.String(), err)
	}

	p, _ = m.serve(t)
	jobs := alice.Send(t, m.room, "!jobs all")
	answer := seen.wait(t, p, time.Minute, "the answer to `!jobs all` after a restart", func(e roomEvent) bool {
		return fromBot(e) && e.ReplyTo == jobs && e.RelType == ""
	})
	if !strings.Contains(answer.Body, "#1 `mtp steps 10") {
		t.Errorf("!jobs all after a restart: %q; want job #1 listed", answer.Body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("the second serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}
