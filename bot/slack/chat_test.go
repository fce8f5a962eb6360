package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/internal/testkit"
)

func chatAdapter(t *testing.T, f *slackfake.Server) *Adapter {
	t.Helper()
	ad, err := New(config.Slack{Enabled: true, Mode: config.SlackModeHTTP, BotToken: "xoxb-x", SigningSecret: testSecret,
		APIURL: f.URL(), Channels: []string{opsChannel}}, Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return ad
}

// TestLongOutputAndChartsGoInAsFiles: thread output longer than a message
// shows (logs, unit diffs) is uploaded into the thread as a text file with
// its first line as the comment, a chart as a PNG, both with the two-step
// upload; short output stays a message.
func TestLongOutputAndChartsGoInAsFiles(t *testing.T) {
	t.Parallel()
	f := slackfake.New(t)
	ad := chatAdapter(t, f)
	ctx := context.Background()
	root, err := ad.Post(ctx, opsChannel, bot.Message{Kind: bot.KindStatus, Text: "🔄 #7 `svc logs qwen` — running"})
	if err != nil {
		t.Fatal(err)
	}
	log := longLog()
	if _, err := ad.Reply(ctx, root, bot.Message{Kind: bot.KindStep, Text: "journal of sglang-qwen.service\n" + log + log}); err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\n chart bytes")
	if _, err := ad.Reply(ctx, root, bot.Message{Kind: bot.KindResult, Text: "*Result of #7*", Image: &bot.Image{Name: "sweep.png", PNG: png}}); err != nil {
		t.Fatal(err)
	}
	s := f.State()
	if len(s.Files) != 2 {
		t.Fatalf("files: %+v; want the log and the chart", s.Files)
	}
	logFile, chart := s.Files[0], s.Files[1]
	if logFile.Thread != root.ID || logFile.Channel != opsChannel || string(logFile.Data) != "journal of sglang-qwen.service\n"+log+log ||
		!strings.HasPrefix(logFile.Comment, "journal of sglang-qwen.service") {
		t.Errorf("log file: %s in %s/%s, %d bytes, comment %q", logFile.Title, logFile.Channel, logFile.Thread, len(logFile.Data), logFile.Comment)
	}
	if chart.Title != "sweep.png" || chart.Thread != root.ID || !bytes.Equal(chart.Data, png) {
		t.Errorf("chart: %+v", chart)
	}
	if th := s.Thread(root.ID); len(th) != 1 || !strings.Contains(slackfake.BlocksText(t, th[0].Blocks), "Result of #7") {
		t.Errorf("thread messages: %+v; want only the result (the log went in as a file)", th)
	}
	if s.Count("files.getUploadURLExternal") != 2 || s.Count("files.completeUploadExternal") != 2 {
		t.Errorf("upload calls: %d get URL, %d complete", s.Count("files.getUploadURLExternal"), s.Count("files.completeUploadExternal"))
	}
}

// TestMentionRunsCommand: an Events API app_mention in an allowed channel
// runs its text; the answer for the user goes to them alone
// (chat.postEphemeral); a retried delivery of the same event runs nothing.
func TestMentionRunsCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil)})
	event := func(id, user, channel, text string) string {
		b, _ := json.Marshal(map[string]any{"type": "event_callback", "event_id": id, "team_id": "T0TEAM", "api_app_id": "A0APP",
			"event": map[string]any{"type": "app_mention", "user": user, "channel": channel, "text": text,
				"ts": "1700000000.000100", "event_ts": "1700000000.000100"}})
		return string(b)
	}
	body := event("Ev1", viewerID, opsChannel, "<@U0BOT> mtp steps 10")
	if code, text := r.post(r.sign(delivery{body: body, contentType: "application/json"})); code != 200 {
		t.Fatalf("event: HTTP %d %s", code, text)
	}
	testkit.WaitFor(r.t, 10*time.Second, "the ephemeral refusal", func() bool { return len(r.slack.State().Ephemeral) == 1 })
	e := r.slack.State().Ephemeral[0]
	if e.User != viewerID || e.Channel != opsChannel || !strings.Contains(e.Text, "needs the operator role") {
		t.Errorf("ephemeral: %+v", e)
	}
	// Slack's retry: a new delivery (new timestamp, so a new signature) of the same event.
	retry := r.sign(delivery{body: body, contentType: "application/json", ts: strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10), retry: "1"})
	if code, _ := r.post(retry); code != 200 {
		t.Fatalf("retry: HTTP %d", code)
	}
	body = event("Ev2", operatorID, otherChan, "<@U0BOT> mtp steps 10")
	if code, _ := r.post(r.sign(delivery{body: body, contentType: "application/json"})); code != 200 {
		t.Fatal("event in another channel not acked")
	}
	testkit.WaitFor(r.t, 10*time.Second, "the channel refusal", func() bool { return len(r.slack.State().Ephemeral) == 2 })
	// The mention and the other channel's reach the door (which refuses the
	// second for its channel); the retry is a duplicate there.
	if n, d := r.in.handled.Load(), r.in.dups.Load(); n != 2 || d != 1 || len(r.jobs()) != 1 {
		t.Errorf("%d requests taken on, %d duplicates, %d jobs; want 2, 1 and 1 (the retry and the other channel run nothing)", n, d, len(r.jobs()))
	}
}

// TestEditsSentAsGiven: the adapter paces nothing of its own (the bot's
// runtime does): each edit is one chat.update at once, in order, and a
// final status edit also gets the outcome's reaction, by its typed status.
func TestEditsSentAsGiven(t *testing.T) {
	t.Parallel()
	f := slackfake.New(t)
	ad := chatAdapter(t, f)
	ctx := context.Background()
	root, err := ad.Post(ctx, opsChannel, bot.Message{Kind: bot.KindStatus, Text: "⏳ #9 queued"})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"🔄 #9 running · a", "🔄 #9 running · b"} {
		if err := ad.Edit(ctx, root, bot.Message{Kind: bot.KindStatus, Text: text, Status: bot.StatusRunning}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ad.Edit(ctx, root, bot.Message{Kind: bot.KindStatus, Final: true, Text: "✅ #9 succeeded", Status: bot.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	s := f.State()
	e := s.Edits[root.ID]
	if len(e) != 3 || e[0].Text != "🔄 #9 running · a" || e[2].Text != "✅ #9 succeeded" {
		t.Fatalf("edits %+v; want each, in order", e)
	}
	if len(s.Reactions) != 1 || s.Reactions[0].Name != "white_check_mark" {
		t.Errorf("reactions %+v", s.Reactions)
	}
}

// TestOneOutcomePerMessage: a job's status message got the interruption's
// reaction from the opsbot process that took the job over; the process that
// ran it records its real outcome late and edits the message again (a
// second Adapter: another process). The message then shows exactly one
// outcome reaction, the late one; a retried late edit changes nothing.
func TestOneOutcomePerMessage(t *testing.T) {
	t.Parallel()
	f := slackfake.New(t)
	taker, late := chatAdapter(t, f), chatAdapter(t, f)
	ctx := context.Background()
	root, err := late.Post(ctx, opsChannel, bot.Message{Kind: bot.KindStatus, Text: "🔄 #12 `mtp steps 8 qwen` — running"})
	if err != nil {
		t.Fatal(err)
	}
	if err := taker.Edit(ctx, root, bot.Message{Kind: bot.KindStatus, Final: true, Text: "⚠️ #12 interrupted", Status: bot.StatusInterrupted}); err != nil {
		t.Fatal(err)
	}
	if got := f.State().Shown[opsChannel+"/"+root.ID]; strings.Join(got, " ") != "warning" {
		t.Fatalf("reactions after the takeover's edit: %v", got)
	}
	lateEdit := bot.Message{Kind: bot.KindStatus, Final: true, Text: "❌ #12 failed (recorded late)", Status: bot.StatusFailed,
		Replaces: bot.StatusInterrupted}
	for range 2 { // the second: a retried edit
		if err := late.Edit(ctx, root, lateEdit); err != nil {
			t.Fatal(err)
		}
		if got := f.State().Shown[opsChannel+"/"+root.ID]; strings.Join(got, " ") != "x" {
			t.Fatalf("reactions after the late edit: %v; want only x", got)
		}
	}
}

// TestServerErrorRetried: a root message Slack fails with a 5xx is sent
// again, so the job still gets its thread; Slack's own refusal is not.
func TestServerErrorRetried(t *testing.T) {
	t.Parallel()
	f := slackfake.New(t)
	ad := chatAdapter(t, f)
	f.Inject("chat.postMessage", 1, false)
	ref, err := ad.Post(context.Background(), opsChannel, bot.Message{Kind: bot.KindStatus, Text: "⏳ #3 queued"})
	if err != nil || ref.ID == "" {
		t.Fatalf("post through one 500: %v", err)
	}
	if n := f.State().Count("chat.postMessage"); n != 2 {
		t.Errorf("%d chat.postMessage calls; want the failed one and its retry", n)
	}
	err = ad.Edit(context.Background(), bot.Ref{Room: opsChannel, ID: "1.000001"}, bot.Message{Kind: bot.KindStatus, Final: true, Text: "✅"})
	if err == nil || !strings.Contains(err.Error(), "message_not_found") {
		t.Fatalf("edit of an unknown message: %v", err)
	}
	if n := f.State().Count("chat.update"); n != 1 {
		t.Errorf("Slack's refusal was sent %d times; want once", n)
	}
}
