package main

import (
	"log/slog"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/bot/slack"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/store"
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

// storeKeeper is an adapter that keeps state of its own in the bot's store
// and holds a lease of the runtime's locker: serve hands it both once the
// bot opened them, before anything is posted (bot.AppOptions.Opened).
type storeKeeper interface {
	bot.Adapter
	keepIn(st *store.Store, locker *leases.Leases)
}

// newMatrixAdapter builds the Matrix adapter of the config's matrix section
// (enabled). It keeps its login, sync token and device keys in the bot's
// store, and syncs only while it holds its sync lease of the runtime's
// locker (limits.lease_ttl): both are handed to it through keepIn.
func newMatrixAdapter(cfg *config.Config, log *slog.Logger) (bot.Adapter, error) {
	a, err := matrix.New(*cfg.Matrix, matrix.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	return matrixAdapter{a}, nil
}

// matrixAdapter is the Matrix adapter as serve hosts it.
type matrixAdapter struct{ *matrix.Adapter }

var _ storeKeeper = matrixAdapter{}

// keepIn hands the adapter the store (its state and mautrix's key tables)
// and the runtime's locker.
func (m matrixAdapter) keepIn(st *store.Store, locker *leases.Leases) {
	m.Attach(matrix.Deps{State: st, Locker: locker, Keys: st})
}
