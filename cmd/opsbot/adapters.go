package main

import (
	"log/slog"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/bot/slack"
	"github.com/opsbot/opsbot/config"
)

// The chat adapters of this build, by config section: `opsbot serve` hosts
// the ones the config enables, and `config check` knows them (adapters).
func init() {
	adapterFactories["slack"] = func(cfg *config.Config, log *slog.Logger) (bot.Adapter, error) {
		return newSlackAdapter(cfg, log)
	}
	adapterFactories["matrix"] = newMatrixAdapter
}

// newSlackAdapter builds the Slack adapter of the config's slack section
// (enabled). It makes no call to Slack; the adapter's Run does.
func newSlackAdapter(cfg *config.Config, log *slog.Logger) (bot.HTTPAdapter, error) {
	return slack.New(*cfg.Slack, slack.Options{Logger: log})
}

// newMatrixAdapter builds the Matrix adapter of the config's matrix section
// (enabled). It keeps its login and sync token in the store at store.path,
// and syncs only while it holds the store's sync lease (limits.lease_ttl).
func newMatrixAdapter(cfg *config.Config, log *slog.Logger) (bot.Adapter, error) {
	return matrix.New(*cfg.Matrix, matrix.Options{Store: bot.StoreConfig(cfg), LeaseTTL: cfg.Limits.LeaseTTL.D(), Logger: log})
}
