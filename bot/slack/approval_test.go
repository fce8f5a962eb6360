package slack

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/store"
)

// TestApprovalButtons: a command that waits for a second person is posted
// to the channel with Approve and Reject; the requester's own Approve is
// refused to them only, the buttons kept and nothing run; a second
// operator's Approve replaces the request with the queued job, which runs
// as the requester's with a status message saying who approved it, audited
// with both. Reject drops another request: nothing runs.
func TestApprovalButtons(t *testing.T) {
	t.Parallel()
	r := newRig(t, rigOptions{backend: quickBackend(nil), twoPerson: []string{"svc restart"}})

	req := r.slash("/svc", "restart qwen", operatorID, opsChannel)
	btn := slackfake.Buttons(req)
	if req.ResponseType != "in_channel" || btn["Approve"] == "" || btn["Reject"] == "" {
		t.Fatalf("request: %s %q buttons %v; want in the channel with Approve and Reject", req.ResponseType, slackfake.BlocksOf(t, req), btn)
	}
	if text := slackfake.BlocksOf(t, req); !strings.Contains(text, "awaiting anyone but") {
		t.Errorf("the request does not say who is awaited: %q", text)
	}

	r.click(btn["Approve"], operatorID, opsChannel, "self")
	if resp := r.response("self", 1); resp.Msg.ReplaceOriginal || resp.Msg.ResponseType != "ephemeral" ||
		!strings.Contains(resp.Raw, "a second person must approve it") {
		t.Errorf("the requester's own Approve: %s; want refused to them only, the request kept", resp.Raw)
	}
	r.click(btn["Approve"], viewerID, opsChannel, "viewer")
	if resp := r.response("viewer", 1); resp.Msg.ReplaceOriginal || !strings.Contains(resp.Raw, "may not approve") {
		t.Errorf("a viewer's Approve: %s; want refused", resp.Raw)
	}
	if js := r.jobs(); len(js) != 0 {
		t.Fatalf("refused approvals started %+v", js)
	}

	r.click(btn["Approve"], secondID, opsChannel, "petra")
	ok := r.response("petra", 1)
	if !ok.Msg.ReplaceOriginal || !strings.Contains(ok.Msg.Text, "approved by") || !strings.Contains(ok.Msg.Text, "queued") {
		t.Fatalf("a second operator's Approve: %s; want the request replaced by the queued job", ok.Raw)
	}
	js := r.jobs()
	if len(js) != 1 || js[0].User != operatorID {
		t.Fatalf("jobs after the approval: %+v; want one, the requester's", js)
	}
	if j := r.waitJob(js[0].ID, 20*time.Second); j.Status != store.Succeeded {
		t.Fatalf("the approved job ended %s (%s)", j.Status, j.Error)
	}
	jt := readJob(r, opsChannel, 0, 10*time.Second)
	if !strings.Contains(jt.final, "approved by") {
		t.Errorf("the job's status message does not say who approved it: %q", jt.final)
	}
	rows, err := r.app.Store.Audit(context.Background(), store.AuditFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	approved := false
	for _, a := range rows {
		approved = approved || (a.User == operatorID && strings.HasPrefix(a.Decision, "approved by slack:"+secondID))
	}
	if !approved {
		t.Errorf("no audit row of the requester's job approved by %s: %+v", secondID, rows)
	}

	// Reject drops a request: nothing runs, and its Approve is used up.
	// (another response_url: the same body within a second is a replay)
	code, body := r.post(r.sign(delivery{body: slashForm("/svc", "restart qwen", operatorID, opsChannel, r.responseURL("again")).Encode()}))
	if code != http.StatusOK {
		t.Fatalf("the second request: HTTP %d %s", code, body)
	}
	req = slack.WebhookMessage{}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	btn = slackfake.Buttons(req)
	r.click(btn["Reject"], secondID, opsChannel, "reject")
	if resp := r.response("reject", 1); !resp.Msg.ReplaceOriginal || !strings.Contains(resp.Msg.Text, "rejected by") {
		t.Errorf("Reject: %s; want the request replaced by its rejection", resp.Raw)
	}
	r.click(btn["Approve"], secondID, opsChannel, "late")
	if resp := r.response("late", 1); !strings.Contains(resp.Raw, "nothing waits for that approval") {
		t.Errorf("Approve after Reject: %s", resp.Raw)
	}
	if n := len(r.jobs()); n != 1 { // a job is recorded when it is approved, before the answer
		t.Errorf("%d jobs after a rejected request, want only the approved one", n)
	}
}
