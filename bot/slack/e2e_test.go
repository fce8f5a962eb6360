package slack

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/store"
)

// jobThread is what Slack shows of one job after it ended.
type jobThread struct {
	root    slackfake.Msg
	edits   []slackfake.Msg
	thread  []slackfake.Msg
	final   string
	result  string
	calls   int
	maxLag  time.Duration // longest wait from a step's time to its line in Slack
	reacted []string
}

// readJob waits until the job's root message in channel shows a final state
// and its result block is in the thread, then reads it all back.
func readJob(r *rig, channel string, since int, within time.Duration) jobThread {
	r.t.Helper()
	var jt jobThread
	testkit.WaitFor(r.t, within, "the job's final status and result in Slack", func() bool {
		s := r.slack.State()
		roots := s.Roots(channel)
		if len(roots) == 0 {
			return false
		}
		jt.root = roots[len(roots)-1]
		jt.edits = s.Edits[jt.root.TS]
		jt.thread = s.Thread(jt.root.TS)
		jt.final = slackfake.BlocksText(r.t, lastBlocks(jt))
		jt.result = ""
		for _, m := range jt.thread {
			if strings.Contains(m.Text, "Result of #") || strings.Contains(slackfake.BlocksText(r.t, m.Blocks), "opsbot · result") {
				jt.result = slackfake.BlocksText(r.t, m.Blocks)
			}
		}
		jt.reacted = nil
		for _, x := range s.Reactions {
			if x.TS == jt.root.TS {
				jt.reacted = append(jt.reacted, x.Name)
			}
		}
		jt.calls = len(s.Calls) - since
		return strings.Contains(jt.final, "final") && jt.result != "" && len(jt.reacted) > 0
	})
	return jt
}

func lastBlocks(jt jobThread) []byte {
	if len(jt.edits) > 0 {
		return jt.edits[len(jt.edits)-1].Blocks
	}
	return jt.root.Blocks
}

var stepTimeRE = regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d) `)

// stepLag is the longest time from a step line's own time (whole seconds,
// UTC) to its arrival in Slack, less the second the line's time rounds down.
func stepLag(t testing.TB, thread []slackfake.Msg) time.Duration {
	var worst time.Duration
	for _, m := range thread {
		for _, sub := range stepTimeRE.FindAllStringSubmatch(slackfake.BlocksText(t, m.Blocks), -1) {
			at, err := time.Parse("15:04:05", sub[1])
			if err != nil {
				continue
			}
			u := m.At.UTC()
			at = time.Date(u.Year(), u.Month(), u.Day(), at.Hour(), at.Minute(), at.Second(), 0, time.UTC)
			if lag := u.Sub(at) - time.Second; lag > worst {
				worst = lag
			}
		}
	}
	return max(worst, 0)
}

// TestMtpStepsOverHTTP: a signed HTTP slash command `/mtp steps 10` runs the
// lab job; Slack shows one root message in the channel, edited in place as
// the job moves, the steps in its thread, the final result block and the
// outcome's reaction.
func TestMtpStepsOverHTTP(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, rigOptions{lab: true})
	before := len(r.slack.State().Calls)
	ack := r.slash("/mtp", "steps 10", operatorID, opsChannel)
	if ack.ResponseType != "ephemeral" || !strings.Contains(ack.Text, "#1 queued: `mtp steps 10") {
		t.Fatalf("ack: %s %q; want ephemeral, with the job's id", ack.ResponseType, ack.Text)
	}
	if _, ok := slackfake.Buttons(ack)["Cancel"]; !ok {
		t.Errorf("ack offers no Cancel: %+v", slackfake.Buttons(ack))
	}
	j := r.waitJob(1, 3*time.Minute)
	if j.Status != store.Succeeded {
		t.Fatalf("job #1 %s: %s", j.Status, j.Error)
	}
	jt := readJob(r, opsChannel, before, 30*time.Second)
	checkJobThread(t, jt)
	jt.maxLag = stepLag(t, jt.thread)
	if testing.Verbose() {
		for _, m := range append([]slackfake.Msg{jt.root}, append(jt.edits, jt.thread...)...) {
			t.Logf("%s %s thread=%s\n%s", m.At.Format("15:04:05.000"), m.TS, m.Thread, slackfake.BlocksText(t, m.Blocks))
		}
	}
	t.Logf("mtp steps 10 over HTTP: %d Slack calls (%d edits, %d thread messages); worst step shown %s after it happened",
		jt.calls, len(jt.edits), len(jt.thread), jt.maxLag)
}

func checkJobThread(t *testing.T, jt jobThread) {
	t.Helper()
	if s := slackfake.BlocksText(t, jt.root.Blocks); !strings.Contains(s, "#1 `mtp steps 10") || !strings.Contains(s, "queued") {
		t.Errorf("root message: %q; want the job queued", s)
	}
	running := 0
	for _, e := range jt.edits {
		if strings.Contains(e.Text, "running") {
			running++
		}
	}
	if running == 0 {
		t.Errorf("no edit showed the job running: %d edits", len(jt.edits))
	}
	if !strings.HasPrefix(jt.final, "✅ #1 `mtp steps 10") || !strings.Contains(jt.final, "succeeded") || !strings.Contains(jt.final, "tok/s") {
		t.Errorf("final status: %q", jt.final)
	}
	var steps strings.Builder
	for _, m := range jt.thread {
		steps.WriteString(slackfake.BlocksText(t, m.Blocks) + "\n")
	}
	for _, want := range []string{"stop", "start", "ready", "bench"} {
		if !strings.Contains(steps.String(), want) {
			t.Errorf("thread has no %q step:\n%s", want, steps.String())
		}
	}
	for _, want := range []string{"Result of #1", "tok/s", "accept"} {
		if !strings.Contains(jt.result, want) {
			t.Errorf("result block lacks %q:\n%s", want, jt.result)
		}
	}
	if len(jt.reacted) != 1 || jt.reacted[0] != "white_check_mark" {
		t.Errorf("reactions on the root: %v; want white_check_mark", jt.reacted)
	}
}

// TestMtpStepsOverSocketMode: the same job through Socket Mode: the slash
// command's envelope is acked with the answer, the job runs on the lab and
// Slack shows the same thread; the envelope delivered again is acked and
// runs nothing.
func TestMtpStepsOverSocketMode(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	r := newRig(t, rigOptions{lab: true, mode: config.SlackModeSocket})
	before := len(r.slack.State().Calls)
	cmd := map[string]string{"command": "/mtp", "text": "steps 10", "user_id": operatorID, "user_name": "olga",
		"channel_id": opsChannel, "team_id": "T0TEAM", "response_url": r.responseURL("socket")}
	r.slack.Send("env-1", "slash_commands", cmd)
	var ack slack.WebhookMessage
	testkit.WaitFor(r.t, 10*time.Second, "the slash command's ack", func() bool { return len(r.slack.Ack("env-1")) == 1 })
	if err := json.Unmarshal(r.slack.Ack("env-1")[0].Payload, &ack); err != nil || !strings.Contains(ack.Text, "#1 queued") ||
		ack.ResponseType != "ephemeral" {
		t.Fatalf("ack %s (%v); want the job's id, ephemeral", r.slack.Ack("env-1")[0].Payload, err)
	}
	r.slack.Send("env-1", "slash_commands", cmd) // Slack's retry of the same envelope
	testkit.WaitFor(r.t, 10*time.Second, "the retry's ack", func() bool { return len(r.slack.Ack("env-1")) == 2 })
	j := r.waitJob(1, 3*time.Minute)
	if j.Status != store.Succeeded {
		t.Fatalf("job #1 %s: %s", j.Status, j.Error)
	}
	jt := readJob(r, opsChannel, before, 30*time.Second)
	checkJobThread(t, jt)
	if n := len(r.jobs()); n != 1 || r.in.handled.Load() != 1 || r.in.dups.Load() != 1 {
		t.Fatalf("%d jobs, %d requests, %d duplicates; the retried envelope must run nothing", n, r.in.handled.Load(), r.in.dups.Load())
	}
	t.Logf("mtp steps 10 over Socket Mode: %d Slack calls (%d edits, %d thread messages); worst step shown %s after it happened",
		jt.calls, len(jt.edits), len(jt.thread), stepLag(t, jt.thread))
}

// TestButtonsOverSocketMode: a preview asked through Socket Mode is
// confirmed by a click delivered through Socket Mode; the answer goes to
// the click's response_url.
func TestButtonsOverSocketMode(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil), mode: config.SlackModeSocket})
	r.slack.Send("env-a", "slash_commands", map[string]string{"command": "/gpu", "text": "recover", "user_id": operatorID,
		"channel_id": opsChannel, "response_url": r.responseURL("socket-preview")})
	testkit.WaitFor(r.t, 10*time.Second, "the preview", func() bool { return len(r.slack.Ack("env-a")) == 1 })
	var preview slack.WebhookMessage
	if err := json.Unmarshal(r.slack.Ack("env-a")[0].Payload, &preview); err != nil {
		t.Fatal(err)
	}
	confirm := slackfake.Buttons(preview)["Confirm"]
	if confirm == "" {
		t.Fatalf("preview without Confirm: %s", r.slack.Ack("env-a")[0].Payload)
	}
	r.slack.Send("env-b", "interactive", map[string]any{"type": "block_actions", "user": map[string]string{"id": operatorID},
		"channel": map[string]string{"id": opsChannel}, "response_url": r.responseURL("socket-click"),
		"actions": []map[string]string{{"action_id": confirm, "block_id": "opsbot_actions", "type": "button"}}})
	if resp := r.response("socket-click", 1); !resp.Msg.ReplaceOriginal || !strings.Contains(resp.Msg.Text, "#1 queued") {
		t.Fatalf("confirm through Socket Mode: %s", resp.Raw)
	}
	if j := r.waitJob(1, 10*time.Second); j.Status != store.Succeeded {
		t.Fatalf("job %s", j.Status)
	}
}
