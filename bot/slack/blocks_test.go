package slack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/internal/testkit"
)

var goldenNow = time.Date(2026, 7, 21, 3, 4, 5, 0, time.UTC)

// longLog is more than a section holds: 120 journal lines.
func longLog() string {
	var b strings.Builder
	b.WriteString("```\n")
	for i := range 120 {
		fmt.Fprintf(&b, "Jul 21 03:04:%02d gpu1 python[4242]: [2026-07-21 03:04:%02d TP0] Decode batch, #running-req: 24, accept len: 3.05\n", i%60, i%60)
	}
	b.WriteString("```")
	return b.String()
}

var goldenMessages = []struct {
	name string
	m    bot.Message
}{
	{"status_queued", bot.Message{Kind: bot.KindStatus, Text: "⏳ #42 `mtp steps 10 qwen` — queued · waiting for gpu1: another job is changing it · by olga"}},
	{"status_running", bot.Message{Kind: bot.KindStatus, Text: "🔄 #42 `mtp steps 10 qwen` — running for 1m23s · wait until ready: 503 warming up · by olga"}},
	{"status_final", bot.Message{Kind: bot.KindStatus, Final: true, Text: "✅ #42 `mtp steps 10 qwen` — succeeded in 2m5s · steps 3 -> 10, 281.3 tok/s · by olga"}},
	{"step", bot.Message{Kind: bot.KindStep, Text: "03:04:05 ▶ stop: systemctl stop sglang-qwen.service\n03:04:07 ⚠ clear GPUs: GPU 0 holds 81234 MiB after the stop"}},
	{"step_long", bot.Message{Kind: bot.KindStep, Text: longLog()}},
	{"result", bot.Message{Kind: bot.KindResult, Text: "*Result of #42* `mtp steps 10 qwen`\nsteps 3 -> 10, 281.3 tok/s\nincidents: gpu_memory_held\nsame settings last time (#40, 2026-02-28 03:04): 270.0 → 281.3 tok/s (+4.2%), accept len 3.10 → 3.20"}},
	{"notice", bot.Message{Kind: bot.KindNotice, Text: "⚠️ #41 `sweep qwen steps 1..5` was interrupted: opsbot stopped while it ran"}},
}

var goldenReplies = []struct {
	name string
	r    bot.Reply
}{
	{"reply_preview", bot.Reply{Outcome: bot.NeedsConfirm, Audience: bot.ToUser,
		Text: "`gpu recover qwen` will stop sglang-qwen.service on gpu1, kill the engine processes of qwen holding GPUs 0-3, and start it again.\nReply `confirm 0123abcd` within 2m0s to go ahead, or run it with --dry-run to see the plan.",
		Actions: []bot.Action{
			{ID: "confirm:0123abcd", Kind: bot.ActConfirm, Label: "Confirm", Expires: goldenNow.Add(2 * time.Minute)},
			{ID: "abort:0123abcd", Kind: bot.ActAbort, Label: "Abort", Expires: goldenNow.Add(2 * time.Minute)}}}},
	{"reply_queued", bot.Reply{Outcome: bot.Queued, Audience: bot.ToUser, JobID: 42, Text: "#42 queued: `mtp steps 10 qwen`",
		Actions: []bot.Action{{ID: "cancel:42", Kind: bot.ActCancel, Label: "Cancel"}}}},
	{"reply_refused", bot.Reply{Outcome: bot.Refused, Audience: bot.ToUser,
		Text: "`mtp steps 10 qwen` needs the operator role; you have viewer. Ask an admin to grant it in the config (auth.users[\"slack:U0VIC\"])."}},
}

// TestGoldenBlocks: each message kind renders to the Block Kit JSON under
// testdata/, and every golden file keeps within Block Kit's limits (50
// blocks, 3000 characters in a text field, 75 in a button's label).
func TestGoldenBlocks(t *testing.T) {
	t.Parallel()
	for _, c := range goldenMessages {
		blocks, fallback := renderMessage(c.m)
		golden(t, c.name, map[string]any{"text": fallback, "blocks": slack.Blocks{BlockSet: blocks}})
	}
	for _, c := range goldenReplies {
		m := (&Adapter{now: func() time.Time { return goldenNow }}).replyMessage(c.r, false)
		golden(t, c.name, m)
	}
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) != len(goldenMessages)+len(goldenReplies) {
		t.Fatalf("golden files %v (%v); want one per case", files, err)
	}
	for _, f := range files {
		checkLimits(t, f)
	}
}

// golden compares v, as indented JSON, with testdata/NAME.json.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, name+".json", string(got)+"\n")
}

// checkLimits reads a golden file back as Slack would and checks Block Kit's
// limits on it.
func checkLimits(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Text   string       `json:"text"`
		Blocks slack.Blocks `json:"blocks"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if n := len(msg.Blocks.BlockSet); n == 0 || n > MaxBlocks {
		t.Errorf("%s: %d blocks; want 1..%d", path, n, MaxBlocks)
	}
	text := func(where string, o *slack.TextBlockObject, max int) {
		if o == nil {
			return
		}
		if n := utf8.RuneCountInString(o.Text); n == 0 || n > max {
			t.Errorf("%s: %s text of %d characters; want 1..%d", path, where, n, max)
		}
	}
	for i, b := range msg.Blocks.BlockSet {
		where := fmt.Sprintf("block %d (%s)", i, b.BlockType())
		switch b := b.(type) {
		case *slack.SectionBlock:
			text(where, b.Text, MaxTextLen)
		case *slack.ContextBlock:
			for _, e := range b.ContextElements.Elements {
				if o, ok := e.(*slack.TextBlockObject); ok {
					text(where, o, MaxTextLen)
				}
			}
		case *slack.ActionBlock:
			if n := len(b.Elements.ElementSet); n == 0 || n > 25 {
				t.Errorf("%s: %s has %d elements", path, where, n)
			}
			for _, e := range b.Elements.ElementSet {
				if btn, ok := e.(*slack.ButtonBlockElement); ok {
					text(where+" button", btn.Text, 75)
					if len(btn.ActionID) > 255 || len(btn.Value) > 2000 {
						t.Errorf("%s: %s button ids too long", path, where)
					}
				}
			}
		default:
			t.Errorf("%s: %s: a block type opsbot does not send", path, where)
		}
	}
}

// TestSplitTextKeepsEverything: text cut into sections keeps every
// character in order, each part within the limit, code blocks closed.
func TestSplitTextKeepsEverything(t *testing.T) {
	t.Parallel()
	inputs := []string{"", "short", longLog(), strings.Repeat("é", 7000), strings.Repeat("word ", 2000) + "\n" + strings.Repeat("x\n", 3000)}
	for _, in := range inputs {
		parts := splitText(in, MaxTextLen)
		var joined strings.Builder
		for _, p := range parts {
			if n := utf8.RuneCountInString(p); n > MaxTextLen {
				t.Errorf("part of %d characters", n)
			}
			if strings.Count(p, "```")%2 != 0 {
				t.Errorf("part with an unclosed code block: %.60q...", p)
			}
			joined.WriteString(strings.NewReplacer("```\n", "", "\n```", "", "```", "").Replace(p))
		}
		strip := func(s string) string {
			return strings.ReplaceAll(strings.NewReplacer("```\n", "", "\n```", "", "```", "").Replace(s), "\n", "")
		}
		if strip(joined.String()) != strip(in) {
			t.Errorf("split of %d characters lost text: %d parts", len(in), len(parts))
		}
	}
}
