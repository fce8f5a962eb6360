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

// leveledChat is a Chat with pacing and room power levels, as Matrix's is.
type leveledChat struct{ pacedGroupedChat }

func (leveledChat) LevelIn(room, user string) (int, bool) { return 50, room == "!a:hs" }

// The wrapper keeps a Chat's power levels (roles granted by
// matrix.power_levels depend on them), alone or beside user groups.
func TestChatWrapperKeepsRoomLevels(t *testing.T) {
	m := NewMetrics(BuildInfo("test", "none"), nil)
	c := m.Chat("matrix", struct {
		bot.Pacer
		bot.Chat
		bot.RoomLevels
	}{pacedGroupedChat{}, pacedGroupedChat{}, leveledChat{}})
	if l, ok := c.(bot.RoomLevels); !ok {
		t.Errorf("wrapped chat lost its power levels: %T", c)
	} else if lv, known := l.LevelIn("!a:hs", "@u:hs"); !known || lv != 50 {
		t.Errorf("wrapped chat's power levels: %d %v", lv, known)
	}
	if p, ok := c.(bot.Pacer); !ok || p.EditInterval() != time.Second {
		t.Errorf("wrapped chat lost its pacing: %T", c)
	}
	both := m.Chat("x", leveledChat{})
	if _, ok := both.(bot.RoomLevels); !ok {
		t.Errorf("wrapped chat with groups lost its power levels: %T", both)
	}
	if _, ok := both.(bot.Membership); !ok {
		t.Errorf("wrapped chat with power levels lost its groups: %T", both)
	}
}
