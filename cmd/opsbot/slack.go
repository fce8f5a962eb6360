package main

import (
	"log/slog"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/slack"
	"github.com/opsbot/opsbot/config"
)

// newSlackAdapter builds the Slack adapter of the config's slack section
// (enabled): the constructor `opsbot serve` registers for that section. It
// makes no call to Slack; the adapter's Run does.
func newSlackAdapter(cfg *config.Config, log *slog.Logger) (bot.HTTPAdapter, error) {
	return slack.New(*cfg.Slack, slack.Options{Logger: log})
}
