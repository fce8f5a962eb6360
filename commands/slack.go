package commands

import "strings"

// slashGroups are the command groups that are slash commands of their own
// in the Slack app (deploy/slack-manifest.yaml registers them, in this
// order): `/mtp steps 10`, from the commands' Policy.Slash, in registry
// order (built by init). Every other command is typed after /opsbot:
// `/opsbot ack 3`. Slack caps how many slash commands an app may have and
// every one a workspace admin installs is a name taken in the workspace, so
// only the groups people type most have their own.
var slashGroups []string

// SlackCatchAll is the Slack slash command that takes any command as its
// text (`/opsbot ack 3`); alone it is `help`.
const SlackCatchAll = "/opsbot"

// SlashCommands returns the slash commands of the Slack app: one per group
// that has its own, then SlackCatchAll. The Slack adapter takes exactly
// these and the manifest registers exactly these.
func SlashCommands() []string {
	out := make([]string, 0, len(slashGroups)+1)
	for _, g := range slashGroups {
		out = append(out, "/"+g)
	}
	return append(out, SlackCatchAll)
}

// slashOf returns the slash command a command of group is typed after.
func slashOf(group string) string {
	for _, g := range slashGroups {
		if g == group {
			return "/" + g
		}
	}
	return SlackCatchAll
}

// InSlack returns how a command is typed in Slack: "/mtp steps 10" for a
// command whose group is a slash command of its own, "/opsbot ack 3" for
// the others. text is the command as typed in a terminal ("ack 3").
func InSlack(text string) string {
	text = strings.TrimSpace(text)
	group, _, _ := strings.Cut(text, " ")
	if s := slashOf(group); s != SlackCatchAll {
		return "/" + text
	}
	return SlackCatchAll + " " + text
}
