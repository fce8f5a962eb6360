package slack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// TestRateLimitHonoured: a 429 on chat.update is waited out for its
// Retry-After and the same update sent again; the thread ends complete.
func TestRateLimitHonoured(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil)})
	r.slack.Inject("chat.update", 1, true)
	start := time.Now()
	ack := r.slash("/mtp", "steps 10", operatorID, opsChannel)
	if !strings.Contains(ack.Text, "#1 queued") {
		t.Fatalf("ack %q", ack.Text)
	}
	jt := readJob(r, opsChannel, 0, 20*time.Second)
	s := r.slack.State()
	var first, retry time.Time
	for _, c := range s.Calls {
		if c.Method == "chat.update" {
			if first.IsZero() {
				first = c.At
			} else if retry.IsZero() {
				retry = c.At
			}
		}
	}
	if retry.Sub(first) < time.Second {
		t.Errorf("chat.update retried %s after the 429; want at least its Retry-After (1s)", retry.Sub(first))
	}
	if !strings.Contains(jt.final, "succeeded") || !strings.Contains(jt.result, "all good") {
		t.Errorf("after the 429 the thread ends %q / %q", jt.final, jt.result)
	}
	t.Logf("job shown complete %s after the command, through one 429", time.Since(start).Round(time.Millisecond))
}

// TestFailedPostsLoseNothing: while Slack fails every chat.update, the job
// runs and ends as it would (its state is in the store); the next update
// that goes through shows the whole state.
func TestFailedPostsLoseNothing(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	r := newRig(t, rigOptions{backend: quickBackend(release)})
	r.slack.Inject("chat.update", 1000, false)
	r.slash("/mtp", "steps 10", operatorID, opsChannel)
	testkit.WaitFor(r.t, 10*time.Second, "the job to run", func() bool {
		js := r.jobs()
		return len(js) == 1 && js[0].Status == store.Running
	})
	testkit.WaitFor(r.t, 10*time.Second, "a failed update", func() bool { return r.slack.State().Count("chat.update") > 0 })
	r.slack.SetDown("chat.update", false) // Slack is back
	close(release)
	if j := r.waitJob(1, 10*time.Second); j.Status != store.Succeeded {
		t.Fatalf("job %s while Slack failed: %s", j.Status, j.Error)
	}
	jt := readJob(r, opsChannel, 0, 10*time.Second)
	if !strings.Contains(jt.final, "succeeded") {
		t.Errorf("final status after the failures: %q", jt.final)
	}
}

// TestReadyFollowsSlack: routes answer 503 and Ready says why until Run has
// checked the token; a token Slack refuses ends Run with an error that
// names the fix.
func TestReadyFollowsSlack(t *testing.T) {
	t.Parallel()
	f := slackfake.New(t)
	ad, err := New(config.Slack{Enabled: true, Mode: config.SlackModeHTTP, BotToken: "xoxb-x", SigningSecret: testSecret,
		APIURL: f.URL(), Channels: []string{opsChannel}}, Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.Ready(); err == nil {
		t.Fatal("ready before Run")
	}
	f.Stop() // Slack unreachable: Run keeps trying, not ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ad.Run(ctx, nil) }()
	if !testkit.Poll(5*time.Second, func() bool { return strings.Contains(errString(ad.Ready()), "auth.test") }) {
		t.Fatalf("Ready while Slack is unreachable: %v", ad.Ready())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}

	revoked := slackfake.New(t)
	revoked.SetAuthError("token_revoked")
	ad, err = New(config.Slack{Enabled: true, Mode: config.SlackModeSocket, BotToken: "xoxb-revoked", AppToken: "xapp-x",
		APIURL: revoked.URL(), Channels: []string{opsChannel}}, Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = ad.Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "slack.bot_token") {
		t.Fatalf("Run with a revoked token: %v; want an error naming slack.bot_token", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
