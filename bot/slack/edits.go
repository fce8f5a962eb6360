package slack

import (
	"context"

	"github.com/opsbot/opsbot/bot"
)

// Edit replaces a message's text with chat.update; a final status edit also
// gets the outcome's reaction. It sends what it is given when it is given:
// the bot's runtime paces a job's edits (EditInterval, bot.Pacer) and sends
// its final edit last, once; a call Slack rate-limits is sent again after
// Retry-After (call).
func (a *Adapter) Edit(ctx context.Context, ref bot.Ref, m bot.Message) error {
	return a.update(ctx, ref, m)
}
