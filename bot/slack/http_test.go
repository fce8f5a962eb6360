package slack

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/slackfake"
)

// TestSignedDeliveries: a good signature runs; a bad one, a stale (or
// future) timestamp and a replay are refused and start nothing.
func TestSignedDeliveries(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil)})
	body := slashForm("/mtp", "steps 10", operatorID, opsChannel, r.responseURL("sig")).Encode()
	now := strconv.FormatInt(time.Now().Unix(), 10)
	good := r.sign(delivery{body: body, ts: now})

	refused := []struct {
		name string
		d    delivery
		code int
	}{
		{"bad signature", r.sign(delivery{body: body, sig: Sign("not-the-secret", now, []byte(body))}), http.StatusUnauthorized},
		{"no signature", r.sign(delivery{body: body, sig: "-"}), http.StatusUnauthorized},
		{"body changed after signing", delivery{body: strings.Replace(body, "10", "11", 1), ts: good.ts, sig: good.sig,
			contentType: good.contentType}, http.StatusUnauthorized},
		{"stale timestamp", r.sign(delivery{body: body, ts: strconv.FormatInt(time.Now().Add(-6*time.Minute).Unix(), 10)}), http.StatusUnauthorized},
		{"future timestamp", r.sign(delivery{body: body, ts: strconv.FormatInt(time.Now().Add(6*time.Minute).Unix(), 10)}), http.StatusUnauthorized},
		{"timestamp not a number", r.sign(delivery{body: body, ts: "yesterday"}), http.StatusUnauthorized},
	}
	for _, c := range refused {
		if code, text := r.post(c.d); code != c.code {
			t.Errorf("%s: HTTP %d (%s), want %d", c.name, code, text, c.code)
		}
	}
	if n := r.in.handled.Load(); n != 0 || len(r.jobs()) != 0 {
		t.Fatalf("refused deliveries reached the bot: %d requests, %d jobs", n, len(r.jobs()))
	}

	code, text := r.post(good)
	if code != http.StatusOK || !strings.Contains(text, "#1 queued") {
		t.Fatalf("good signature: HTTP %d %s; want 200 and the job's id", code, text)
	}
	r.waitJob(1, 30*time.Second)

	// The same delivery again (a replay, within the 5 minutes) starts nothing.
	if code, text := r.post(good); code != http.StatusConflict {
		t.Errorf("replay: HTTP %d %s, want 409", code, text)
	}
	if n := r.in.handled.Load(); n != 1 || len(r.jobs()) != 1 || r.in.dups.Load() != 1 {
		t.Fatalf("after the replay: %d requests, %d jobs, %d duplicates; want 1, 1 and 1", n, len(r.jobs()), r.in.dups.Load())
	}
}

// TestURLVerificationAnswered: the Events API's url_verification is
// answered with its challenge, signed like every delivery.
func TestURLVerificationAnswered(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil)})
	body := `{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	code, text := r.post(r.sign(delivery{body: body, contentType: "application/json"}))
	if code != http.StatusOK || !strings.Contains(text, `"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"`) {
		t.Fatalf("url_verification: HTTP %d %s", code, text)
	}
	code, _ = r.post(r.sign(delivery{body: body, contentType: "application/json", sig: "v0=00"}))
	if code != http.StatusUnauthorized {
		t.Fatalf("unsigned url_verification: HTTP %d, want 401", code)
	}
}

// TestRefusalsAreEphemeral: usage errors, a missing role, a channel outside
// the allowlist and a DM (allow_dms off) go back to the user only and start
// nothing.
func TestRefusalsAreEphemeral(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil)})
	cases := []struct {
		name, command, text, user, channel, want string
	}{
		{"usage error", "/mtp", "steps many", operatorID, opsChannel, "steps"},
		{"no role", "/mtp", "steps 10", viewerID, opsChannel, "needs the operator role"},
		{"unknown user", "/mtp", "steps 10", strangerID, opsChannel, "you have none"},
		{"channel not allowed", "/mtp", "steps 10", operatorID, otherChan, "no commands in this channel"},
		{"direct message", "/mtp", "steps 10", operatorID, "D0DM", "direct messages"},
		{"unknown command", "/deploy", "all", operatorID, opsChannel, "does not know /deploy"},
	}
	for _, c := range cases {
		m := r.slash(c.command, c.text, c.user, c.channel)
		if m.ResponseType != "ephemeral" || !strings.Contains(slackfake.BlocksOf(t, m), c.want) {
			t.Errorf("%s: %s %q; want ephemeral with %q", c.name, m.ResponseType, slackfake.BlocksOf(t, m), c.want)
		}
	}
	if js := r.jobs(); len(js) != 2 { // the two refusals by role are recorded, as refused
		t.Fatalf("jobs: %+v; want only the two refused by role", js)
	}
	for _, j := range r.jobs() {
		if j.Status != "refused" {
			t.Errorf("job #%d %s is %s", j.ID, j.Command, j.Status)
		}
	}
	// A viewer's read-only command answers in the channel.
	m := r.slash("/opsbot", "help", viewerID, opsChannel)
	if m.ResponseType != "in_channel" || !strings.Contains(slackfake.BlocksOf(t, m), "mtp steps") {
		t.Errorf("/opsbot help: %s %q", m.ResponseType, slackfake.BlocksOf(t, m))
	}
}

// TestUserGroupGrantsRole: a member of a user group listed in auth.users
// holds its role; who it is comes from the user id, never a name.
func TestUserGroupGrantsRole(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil)})
	m := r.slash("/mtp", "steps 10", groupMember, opsChannel)
	if !strings.Contains(m.Text, "queued") {
		t.Fatalf("group member: %q; want the job queued", m.Text)
	}
	form := slashForm("/mtp", "steps 10", strangerID, opsChannel, r.responseURL("x"))
	form.Set("user_name", "u0grace") // the member's name, on another user id
	_, body := r.post(r.sign(delivery{body: form.Encode()}))
	if !strings.Contains(body, "you have none") {
		t.Fatalf("a stranger named like the member: %s", body)
	}
}

// TestDirectMessagesWhenAllowed: with slack.allow_dms a command in a DM runs.
func TestDirectMessagesWhenAllowed(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil), allowDM: true})
	if m := r.slash("/mtp", "steps 10", operatorID, "D0DM"); !strings.Contains(m.Text, "#1 queued") {
		t.Fatalf("DM with allow_dms: %q", m.Text)
	}
	if m := r.slash("/mtp", "steps 10", operatorID, otherChan); !strings.Contains(slackfake.BlocksOf(t, m), "no commands in this channel") {
		t.Fatalf("a channel outside the list, DMs allowed: %q", slackfake.BlocksOf(t, m))
	}
}

// TestUnsignedRefusedBeforeTheBody: a delivery without a signature, or with
// a timestamp 10 minutes old, is answered 401 before its body is read (a
// body that never comes holds nothing), and counted by reason, not logged.
func TestUnsignedRefusedBeforeTheBody(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{})
	var mu sync.Mutex
	reasons := map[string]int{}
	r.ad.CountRejects(func(reason string) { mu.Lock(); reasons[reason]++; mu.Unlock() })
	for _, c := range []struct{ ts, sig, reason string }{
		{"", "", "no_signature"},
		{strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10), "v0=00", "stale_timestamp"},
	} {
		conn, err := net.Dial("tcp", r.events.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n", EventsPath)
		if c.ts != "" {
			fmt.Fprintf(conn, "X-Slack-Request-Timestamp: %s\r\nX-Slack-Signature: %s\r\n", c.ts, c.sig)
		}
		fmt.Fprint(conn, "\r\n") // and no body
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		status, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil || !strings.Contains(status, "401") {
			t.Errorf("%s: %q %v; want 401 at once", c.reason, status, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reasons["no_signature"] != 1 || reasons["stale_timestamp"] != 1 {
		t.Errorf("counted %v", reasons)
	}
	if n := r.in.handled.Load() + r.in.acted.Load(); n != 0 {
		t.Errorf("%d refused deliveries reached the bot", n)
	}
}
