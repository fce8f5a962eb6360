package console

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/bot"
)

// In the demo (Live), the status line prints while the job is queued and
// when it starts; once its step lines print, only the final status prints
// again, not one status line per event.
func TestLiveStatusNotReprintedAfterEachEvent(t *testing.T) {
	var out bytes.Buffer
	c := New(&out)
	c.Live = true
	ctx := context.Background()
	ref, _ := c.Post(ctx, Room, bot.Message{Kind: bot.KindStatus, Text: "#1 queued"})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Text: "#1 queued · waiting for qwen"})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Text: "#1 running"})
	for _, s := range []string{"stop", "start", "verify"} {
		c.Reply(ctx, ref, bot.Message{Kind: bot.KindStep, Text: "step " + s})
		c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Text: "#1 running for 1s · " + s})
	}
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Text: "#1 succeeded", Final: true})
	want := "#1 queued\n#1 queued · waiting for qwen\n#1 running\n    step stop\n    step start\n    step verify\n#1 succeeded\n"
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
}

// In `opsbot run` (not Live) the intermediate statuses are not printed,
// except a wait for a service another job holds, which names the holder,
// and the status after it (the job has the service), once.
func TestRunPrintsWaitForHolderAndWhenItHasIt(t *testing.T) {
	t.Parallel()
	for _, waitsOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("WaitsOnly=%v", waitsOnly), func(t *testing.T) {
			t.Parallel()
			testPrintsWait(t, waitsOnly)
		})
	}
}

// testPrintsWait: with WaitsOnly (run --json's stderr) only the wait and
// the status after it print.
func testPrintsWait(t *testing.T, waitsOnly bool) {
	var out bytes.Buffer
	c := New(&out)
	c.WaitsOnly = waitsOnly
	ctx := context.Background()
	ref, _ := c.Post(ctx, Room, bot.Message{Kind: bot.KindStatus, Text: "#2 queued"})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Text: "#2 queued · about to start"})
	wait := "#2 queued · waiting for qwen: job #1 of opsbot on host1 (pid 4242) is changing it"
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Status: bot.StatusWaiting, Text: wait})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Status: bot.StatusWaiting, Text: wait})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Status: bot.StatusRunning, Text: "#2 running"})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Status: bot.StatusRunning, Text: "#2 running for 1s"})
	c.Reply(ctx, ref, bot.Message{Kind: bot.KindStep, Text: "step stop"})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Status: bot.StatusRunning, Text: "#2 running for 2s · stop"})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Text: "#2 succeeded", Final: true})
	// A job that never waits prints no intermediate status.
	ref3, _ := c.Post(ctx, Room, bot.Message{Kind: bot.KindStatus, Text: "#3 queued"})
	c.Edit(ctx, ref3, bot.Message{Kind: bot.KindStatus, Status: bot.StatusRunning, Text: "#3 running"})
	c.Edit(ctx, ref3, bot.Message{Kind: bot.KindStatus, Text: "#3 succeeded", Final: true})
	want := "#2 queued\n" + wait + "\n#2 running\n    step stop\n#2 succeeded\n#3 queued\n#3 succeeded\n"
	if waitsOnly {
		want = wait + "\n#2 running\n"
	}
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
}

// Output that arrives while the demo's prompt is on screen moves the prompt
// below it: the prompt is drawn again after the output (erased in place on a
// terminal), and not after a line the user entered.
func TestPromptRedrawnAfterOutput(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var out bytes.Buffer
		c := New(&out)
		c.TTY = tty
		c.showPrompt("> ")
		c.Notice("✅ #1 done")
		c.Notice("next")
		c.inputRead()
		c.Notice("answer")
		want := "> \n✅ #1 done\n> \nnext\n> answer\n"
		if tty {
			want = "> \r\x1b[K✅ #1 done\n> \r\x1b[Knext\n> answer\n"
		}
		if out.String() != want {
			t.Errorf("tty %v: printed %q, want %q", tty, out.String(), want)
		}
	}
}

// A terminal shows preformatted blocks (history, journal lines) plain: no
// Markdown fences, in answers and in threads alike.
func TestBlocksPrintedPlain(t *testing.T) {
	var out bytes.Buffer
	c := New(&out)
	ctx := context.Background()
	ref, _ := c.Post(ctx, Room, bot.Message{Text: "#2 svc logs"})
	c.Reply(ctx, ref, bot.Message{Kind: bot.KindResult, Text: "last 2 lines\n" + bot.Pre("line 1\nline 2")})
	c.Show(bot.Reply{Outcome: bot.Answered, Text: bot.Pre("benchmark history of qwen")})
	if strings.Contains(out.String(), "```") {
		t.Errorf("fences printed in a terminal:\n%s", out.String())
	}
	want := "#2 svc logs\n    last 2 lines\n    line 1\n    line 2\nbenchmark history of qwen\n"
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A root message's lines after the first (a failed job's error under its
// status line) are indented under it, when posted and when edited, so that
// they do not read as a message of their own; step lines stay indented
// further.
func TestStatusContinuationIndented(t *testing.T) {
	var out bytes.Buffer
	c := New(&out)
	ctx := context.Background()
	ref, _ := c.Post(ctx, Room, bot.Message{Kind: bot.KindStatus, Text: "#1 queued"})
	c.Reply(ctx, ref, bot.Message{Kind: bot.KindStep, Text: "step stop"})
	c.Edit(ctx, ref, bot.Message{Kind: bot.KindStatus, Final: true,
		Text: "❌ #1 `svc start qwen` — failed in 3s\nstart sglang-qwen.service on gpu1: the unit failed\n" + bot.Pre("line 1")})
	c.Post(ctx, Room, bot.Message{Kind: bot.KindStatus, Text: "⚠️ #2 interrupted\nnow: qwen is stopped"})
	want := "#1 queued\n    step stop\n❌ #1 `svc start qwen` — failed in 3s\n   start sglang-qwen.service on gpu1: the unit failed\n   line 1\n" +
		"⚠️ #2 interrupted\n   now: qwen is stopped\n"
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
}
