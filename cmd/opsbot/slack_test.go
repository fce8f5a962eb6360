package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/config"
)

// TestSlackAdapterBuilds: the example config with slack enabled builds the
// Slack adapter this build registers, and config check accepts it.
func TestSlackAdapterBuilds(t *testing.T) {
	t.Setenv("SLACK_BOT_TOKEN", "xoxb-1-EXAMPLE")
	t.Setenv("SLACK_APP_TOKEN", "xapp-1-EXAMPLE")
	dir := t.TempDir()
	writeSSHFiles(t, dir, 0o600)
	path := exampleIn(t, dir, func(s string) string { return strings.Replace(s, "enabled: false", "enabled: true", 1) })
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !adapters["slack"] {
		t.Fatal("this build does not list its Slack adapter")
	}
	ad, err := newSlackAdapter(cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if ad.Platform() != "slack" || ad.Ready() == nil || ad.Routes()["POST /slack/events"] == nil {
		t.Fatalf("adapter %s: ready before Run (%v) or without POST /slack/events", ad.Platform(), ad.Ready())
	}
	if code, _, stderr := configCheck(t, "config", "check", "--config", path); code != 0 {
		t.Fatalf("config check with slack enabled: exit %d\n%s", code, stderr)
	}
}
