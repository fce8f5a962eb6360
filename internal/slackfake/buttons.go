package slackfake

import "github.com/slack-go/slack"

// Buttons returns the buttons of m's action blocks as label -> action id,
// the id a test sends back to click one; a message without blocks has none.
// A label that stands on two buttons keeps the last one's id.
func Buttons(m slack.WebhookMessage) map[string]string {
	out := map[string]string{}
	if m.Blocks == nil {
		return out
	}
	for _, b := range m.Blocks.BlockSet {
		if ab, ok := b.(*slack.ActionBlock); ok {
			for _, e := range ab.Elements.ElementSet {
				if btn, ok := e.(*slack.ButtonBlockElement); ok {
					out[btn.Text.Text] = btn.ActionID
				}
			}
		}
	}
	return out
}
