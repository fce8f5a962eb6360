package slack

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
)

// TestManifestMatchesAdapter: deploy/slack-manifest.yaml declares every
// slash command the adapter takes, the scopes its calls need, the events it
// handles, the Messages tab DMs need, interactivity for its buttons and
// Socket Mode.
func TestManifestMatchesAdapter(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/slack-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Features struct {
			BotUser struct {
				DisplayName string `yaml:"display_name"`
			} `yaml:"bot_user"`
			AppHome struct {
				MessagesTab         *bool `yaml:"messages_tab_enabled"`
				MessagesTabReadOnly *bool `yaml:"messages_tab_read_only_enabled"`
			} `yaml:"app_home"`
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
	// slack.allow_dms takes commands in the DM with the bot: Slack shows
	// that conversation only with the Messages tab on, and lets people
	// write in it only when it is not read-only.
	if h := m.Features.AppHome; h.MessagesTab == nil || !*h.MessagesTab || h.MessagesTabReadOnly == nil || *h.MessagesTabReadOnly {
		t.Errorf("manifest: features.app_home must set messages_tab_enabled: true and messages_tab_read_only_enabled: false for DMs (slack.allow_dms)")
	}
	if strings.Contains(string(b), "xoxb-") || strings.Contains(string(b), "xapp-1") {
		t.Error("manifest holds a token")
	}
}

// slashRE finds what reads as a slash command in text: `/WORD` at the start
// of a code span, or after a space, a quote or an opening parenthesis.
var slashRE = regexp.MustCompile("(?:^|[\\s`'\"(])(/[a-z][a-z-]*)\\b")

// TestSlashCommandsShownAreRegistered: every slash command that `help` (the
// overview and each command's help) and the README show is one the manifest
// registers (and so one the adapter takes): no `/ack 3` or `/job 42`, which
// Slack would answer "not a valid command". Words that are not commands of
// opsbot (`/invite`, `/healthz`) are left alone; paths (`/etc/opsbot`) too.
func TestSlashCommandsShownAreRegistered(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/slack-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Features struct {
			SlashCommands []struct{ Command string } `yaml:"slash_commands"`
		}
	}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, c := range m.Features.SlashCommands {
		registered[c.Command] = true
	}
	// opsbot's words: its command groups, and the catch-all.
	ours := map[string]bool{bot.SlashCatchAll: true}
	for _, s := range commands.Specs() {
		ours["/"+s.Group()] = true
	}
	texts := map[string]string{}
	for _, topic := range append([]string{""}, groupsAndPaths()...) {
		h, err := commands.Help(topic)
		if err != nil {
			t.Fatal(err)
		}
		texts["help "+topic] = h
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	texts["README.md"] = string(readme)
	seen := 0
	for where, text := range texts {
		for _, line := range strings.Split(text, "\n") {
			for _, sm := range slashRE.FindAllStringSubmatchIndex(line, -1) {
				word := line[sm[2]:sm[3]]
				if end := sm[3]; end < len(line) && line[end] == '/' {
					continue // a path, such as /etc/opsbot/env
				}
				if !ours[word] {
					continue
				}
				seen++
				if !registered[word] {
					t.Errorf("%s shows %s, which the Slack app does not register (type it after %s): %q",
						where, word, bot.SlashCatchAll, strings.TrimSpace(line))
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("found no slash command in help or the README: the pattern is broken")
	}
}

// groupsAndPaths are the help topics: each group and each command path.
func groupsAndPaths() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range commands.Specs() {
		for _, p := range []string{s.Group(), s.Path} {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}
