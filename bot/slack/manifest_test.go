package slack

import (
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestManifestMatchesAdapter: deploy/slack-manifest.yaml declares every
// slash command the adapter takes, the scopes its calls need, the events it
// handles, interactivity for its buttons and Socket Mode.
func TestManifestMatchesAdapter(t *testing.T) {
	b, err := os.ReadFile("../../deploy/slack-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Features struct {
			BotUser struct {
				DisplayName string `yaml:"display_name"`
			} `yaml:"bot_user"`
			SlashCommands []struct {
				Command, Description string
				UsageHint            string `yaml:"usage_hint"`
			} `yaml:"slash_commands"`
		}
		OAuth struct {
			Scopes struct{ Bot []string } `yaml:"scopes"`
		} `yaml:"oauth_config"`
		Settings struct {
			Events struct {
				BotEvents []string `yaml:"bot_events"`
			} `yaml:"event_subscriptions"`
			Interactivity struct {
				Enabled bool `yaml:"is_enabled"`
			} `yaml:"interactivity"`
			SocketMode bool `yaml:"socket_mode_enabled"`
		}
	}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, c := range m.Features.SlashCommands {
		cmds = append(cmds, c.Command)
		if c.Description == "" || len(c.Description) > 100 || len(c.UsageHint) > 100 {
			t.Errorf("%s: description %q, usage hint %q (Slack wants both, at most 100 characters)", c.Command, c.Description, c.UsageHint)
		}
	}
	if !slices.Equal(cmds, Commands) {
		t.Errorf("manifest commands %v; the adapter takes %v", cmds, Commands)
	}
	for _, scope := range []string{"commands", "chat:write", "reactions:write", "files:write", "usergroups:read", "app_mentions:read", "im:history"} {
		if !slices.Contains(m.OAuth.Scopes.Bot, scope) {
			t.Errorf("manifest lacks the bot scope %s", scope)
		}
	}
	for _, ev := range []string{"app_mention", "message.im"} {
		if !slices.Contains(m.Settings.Events.BotEvents, ev) {
			t.Errorf("manifest lacks the event %s", ev)
		}
	}
	if !m.Settings.Interactivity.Enabled || !m.Settings.SocketMode || m.Features.BotUser.DisplayName == "" {
		t.Errorf("manifest settings: %+v, bot user %+v", m.Settings, m.Features.BotUser)
	}
	if strings.Contains(string(b), "xoxb-") || strings.Contains(string(b), "xapp-1") {
		t.Error("manifest holds a token")
	}
}
