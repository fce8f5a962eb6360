package slack

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzDeliveries: whatever a correctly signed delivery holds (a form, an
// interaction payload, Events API JSON, or garbage), the endpoint answers
// with a status and never panics; unsigned, it reaches nothing.
func FuzzDeliveries(f *testing.F) {
	f.Add("application/x-www-form-urlencoded", "command=%2Fmtp&text=steps+10&user_id=U0OLGA&channel_id=C0OPS")
	f.Add("application/x-www-form-urlencoded", `payload={"type":"block_actions","user":{"id":"U0OLGA"},"channel":{"id":"C0OPS"},"actions":[{"action_id":"cancel:1"}]}`)
	f.Add("application/json", `{"type":"url_verification","challenge":"abc"}`)
	f.Add("application/json", `{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","user":"U0VIC","channel":"C0OPS","text":"<@U0BOT> jobs"}}`)
	f.Add("application/json", `{"type":"event_callback","event":{"type":"message","channel_type":"im"}}`)
	f.Add("text/plain", "\x00\xff")
	r := newRig(f, rigOptions{backend: quickBackend(nil)})
	f.Fuzz(func(t *testing.T, contentType, body string) {
		if strings.ContainsFunc(contentType, func(c rune) bool { return c < ' ' || c == 0x7f }) {
			t.Skip("not a header value an HTTP client sends")
		}
		code, _ := r.postT(t, r.sign(delivery{body: body, contentType: contentType}))
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict:
		default:
			t.Fatalf("signed delivery %q: HTTP %d", body, code)
		}
		handled := r.in.handled.Load() + r.in.acted.Load()
		code, _ = r.postT(t, r.sign(delivery{body: body, contentType: contentType, sig: "v0=" + strings.Repeat("0", 64)}))
		if code != http.StatusUnauthorized || r.in.handled.Load()+r.in.acted.Load() != handled {
			t.Fatalf("unsigned delivery: HTTP %d", code)
		}
	})
}
