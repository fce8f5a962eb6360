//go:build deps

// Package deps pins, in go.mod, the chat libraries the Slack and Matrix
// adapters are built on (slack-go/slack, mautrix), so every package of opsbot
// agrees on one version of each before the adapters import them. It is never
// built: its build tag is not set by any build.
package deps

import (
	_ "github.com/slack-go/slack"
	_ "maunium.net/go/mautrix"
)
