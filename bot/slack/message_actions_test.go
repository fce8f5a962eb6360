package slack

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// A message that offers actions (the watchdog's Recover in an alert's
// thread) shows one button per action, each carrying the action's id back,
// with the expiry; a message without actions shows none.
func TestMessageActionsAreButtons(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(2 * time.Minute)
	m := bot.Message{Kind: bot.KindNotice, Text: "qwen is in a restart loop: recover it?",
		Actions: []bot.Action{
			{ID: "confirm:abc123", Kind: bot.ActConfirm, Label: "Recover", Expires: exp},
			{ID: "abort:abc123", Kind: bot.ActAbort, Label: "Dismiss", Expires: exp},
		}}
	blocks, _ := renderMessage(m)
	b, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{`"type":"actions"`, `"action_id":"confirm:abc123"`, `"action_id":"abort:abc123"`, `"text":"Recover"`, "expires "} {
		if !strings.Contains(out, want) {
			t.Errorf("blocks lack %s:\n%s", want, out)
		}
	}
	m.Actions = nil
	blocks, _ = renderMessage(m)
	if b, _ := json.Marshal(blocks); strings.Contains(string(b), `"type":"actions"`) {
		t.Errorf("a message without actions shows buttons:\n%s", b)
	}
}
