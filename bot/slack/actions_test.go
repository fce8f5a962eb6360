package slack

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/store"
)

// response waits for the answer posted to the response_url named name and
// returns the n-th (1-based) one.
func (r *rig) response(name string, n int) slackfake.Response {
	r.t.Helper()
	var got slackfake.Response
	testkit.WaitFor(r.t, 10*time.Second, "answer "+name+" #"+string(rune('0'+n)), func() bool {
		k := 0
		for _, resp := range r.slack.State().Responses {
			if resp.Path == "/response/"+name {
				if k++; k == n {
					got = resp
					return true
				}
			}
		}
		return false
	})
	return got
}

// TestConfirmAbortCancelButtons: a command that needs confirmation is
// previewed to its user with Confirm and Abort and the expiry; a click by a
// user without the role, or by another operator, is refused to that user
// only and changes nothing; the requester's Confirm queues the job with a
// Cancel button, which a viewer cannot use and the requester can.
func TestConfirmAbortCancelButtons(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	r := newRig(t, rigOptions{backend: quickBackend(release)})

	preview := r.slash("/gpu", "recover", operatorID, opsChannel)
	btn := slackfake.Buttons(preview)
	if preview.ResponseType != "ephemeral" || btn["Confirm"] == "" || btn["Abort"] == "" {
		t.Fatalf("preview: %s %q buttons %v; want ephemeral with Confirm and Abort", preview.ResponseType, slackfake.BlocksOf(t, preview), btn)
	}
	if text := slackfake.BlocksOf(t, preview); !strings.Contains(text, "expires") || !strings.Contains(text, "recover") {
		t.Errorf("preview does not say what and until when: %q", text)
	}

	r.click(btn["Confirm"], viewerID, opsChannel, "viewer")
	r.click(btn["Confirm"], adminID, opsChannel, "admin") // not theirs: only the requester confirms
	for _, name := range []string{"viewer", "admin"} {
		resp := r.response(name, 1)
		if resp.Msg.ReplaceOriginal || resp.Msg.ResponseType != "ephemeral" {
			t.Errorf("%s's refused click: %s; want ephemeral, the preview kept", name, resp.Raw)
		}
	}
	if js := r.jobs(); len(js) != 0 {
		t.Fatalf("refused clicks started %+v", js)
	}

	r.click(btn["Confirm"], operatorID, opsChannel, "olga")
	queued := r.response("olga", 1)
	if !queued.Msg.ReplaceOriginal || !strings.Contains(queued.Msg.Text, "queued") {
		t.Fatalf("confirm: %s; want the preview replaced by the queued job", queued.Raw)
	}
	cancel := slackfake.Buttons(queued.Msg)["Cancel"]
	if cancel == "" {
		t.Fatalf("the queued job offers no Cancel: %s", queued.Raw)
	}
	r.click(btn["Confirm"], operatorID, opsChannel, "olga") // again: used up
	if again := r.response("olga", 2); !strings.Contains(again.Msg.Text+slackfake.BlocksOf(t, again.Msg), "confirm") || len(r.jobs()) != 1 {
		t.Errorf("second confirm: %s with %d jobs; want it refused, one job", again.Raw, len(r.jobs()))
	}

	r.click(cancel, viewerID, opsChannel, "viewer")
	if resp := r.response("viewer", 2); resp.Msg.ReplaceOriginal || resp.Msg.ResponseType != "ephemeral" {
		t.Errorf("viewer's cancel: %s; want refused to the viewer only", resp.Raw)
	}
	if j := r.jobs()[0]; j.Status != store.Queued && j.Status != store.Running {
		t.Fatalf("the viewer's click ended the job: %s", j.Status)
	}
	r.click(cancel, operatorID, opsChannel, "olga")
	if j := r.waitJob(r.jobs()[0].ID, 10*time.Second); j.Status != store.Cancelled {
		t.Fatalf("after the requester's Cancel the job is %s", j.Status)
	}
	if resp := r.response("olga", 3); !strings.Contains(resp.Raw, "cancel") {
		t.Errorf("cancel answered %s", resp.Raw)
	}
	jt := readJob(r, opsChannel, 0, 10*time.Second)
	if len(jt.reacted) != 1 || jt.reacted[0] != "no_entry_sign" || !strings.Contains(jt.final, "cancelled") {
		t.Errorf("cancelled job's root: %q, reactions %v", jt.final, jt.reacted)
	}

	// Abort drops a preview: nothing runs.
	preview = r.slash("/svc", "stop", operatorID, opsChannel)
	r.click(slackfake.Buttons(preview)["Abort"], operatorID, opsChannel, "abort")
	if resp := r.response("abort", 1); !resp.Msg.ReplaceOriginal || !strings.Contains(resp.Msg.Text, "aborted") {
		t.Errorf("abort: %s", resp.Raw)
	}
	if n := len(r.jobs()); n != 1 {
		t.Errorf("abort left %d jobs; want only the cancelled one", n)
	}
}
