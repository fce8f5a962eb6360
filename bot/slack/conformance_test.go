package slack

import (
	"net/http"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/internal/chattest"
	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/store"
)

// slackChat drives the conformance suite through the adapter's HTTP
// endpoint as Slack does: signed slash commands from the operator, a second
// operator, an operator of coder only or a user with no role, in the
// allowed channel or another.
type slackChat struct{ r *rig }

func (s slackChat) Name() string        { return Platform }
func (s slackChat) Store() *store.Store { return s.r.app.Store }
func (s slackChat) HasRooms() bool      { return true }

func (s slackChat) Send(t testing.TB, as chattest.User, in chattest.Room, text string) chattest.Sent {
	user, channel := map[chattest.User]string{chattest.Operator: operatorID, chattest.NoRole: strangerID,
		chattest.Second: secondID, chattest.Scoped: scopedID}[as], opsChannel
	if in == chattest.OffList {
		channel = "C0RANDOM"
	}
	word, rest, _ := strings.Cut(text, " ")
	command := "/" + word
	if !strings.Contains(strings.Join(Commands, " "), command+" ") && command != "/opsbot" {
		command, rest = "/opsbot", text
	}
	d := s.r.sign(delivery{body: slashForm(command, rest, user, channel, s.r.responseURL(user)).Encode()})
	if code, body := s.r.post(d); code != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d %s", command, rest, code, body)
	}
	return d
}

// Said is every message, edit and ephemeral the bot posted, as Slack
// shows them (the blocks' text, else the fallback text).
func (s slackChat) Said(t testing.TB) string {
	st := s.r.slack.State()
	var b strings.Builder
	add := func(m slackfake.Msg) {
		if text := slackfake.BlocksText(t, m.Blocks); text != "" {
			b.WriteString(text + "\n")
			return
		}
		b.WriteString(m.Text + "\n")
	}
	for _, m := range st.Msgs {
		add(m)
		for _, e := range st.Edits[m.TS] {
			add(e)
		}
	}
	for _, m := range st.Ephemeral {
		add(m)
	}
	return b.String()
}

// Replay posts the same signed delivery again: 409, nothing runs.
func (s slackChat) Replay(t testing.TB, sent chattest.Sent) bool {
	if code, body := s.r.post(sent.(delivery)); code != http.StatusConflict {
		t.Fatalf("replay: HTTP %d %s, want 409", code, body)
	}
	return true
}

// TestConformance: the chat conformance suite through Slack's HTTP mode.
func TestConformance(t *testing.T) {
	t.Parallel()
	chattest.Run(t, slackChat{newRig(t, rigOptions{lab: true, twoPerson: []string{chattest.TwoPerson}})})
}
