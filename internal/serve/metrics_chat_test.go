package serve

import (
	"context"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// pacedGroupedChat is a Chat with pacing and user groups, as Slack's is.
type pacedGroupedChat struct{}

func (pacedGroupedChat) Post(context.Context, string, bot.Message) (bot.Ref, error) {
	return bot.Ref{}, nil
}
func (pacedGroupedChat) Edit(context.Context, bot.Ref, bot.Message) error { return nil }
func (pacedGroupedChat) Reply(context.Context, bot.Ref, bot.Message) (bot.Ref, error) {
	return bot.Ref{}, nil
}
func (pacedGroupedChat) EditInterval() time.Duration   { return time.Second }
func (pacedGroupedChat) GroupsOf(user string) []string { return []string{"S1"} }

// The metrics wrapper hides nothing the bot looks for on a Chat: its pacing
// and its user groups (roles granted to a Slack user group depend on it).
func TestChatWrapperKeepsPacingAndGroups(t *testing.T) {
	m := NewMetrics(BuildInfo("test", "none"), nil)
	c := m.Chat("slack", pacedGroupedChat{})
	p, ok := c.(bot.Pacer)
	if !ok || p.EditInterval() != time.Second {
		t.Errorf("wrapped chat lost its pacing: %T", c)
	}
	g, ok := c.(bot.Membership)
	if !ok || len(g.GroupsOf("U1")) != 1 {
		t.Errorf("wrapped chat lost its user groups: %T", c)
	}
}
