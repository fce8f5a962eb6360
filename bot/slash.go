package bot

import "github.com/opsbot/opsbot/commands"

// SlashCommands are the Slack app's slash commands, from the command
// language (commands.SlashCommands): the Slack adapter takes exactly these
// and deploy/slack-manifest.yaml registers exactly these.
func SlashCommands() []string { return commands.SlashCommands() }

// SlashCatchAll is the slash command whose text is any command (`/opsbot
// ack 3`); alone it means `help`.
const SlashCatchAll = commands.SlackCatchAll
