package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
)

// EventsPath is the one HTTP endpoint of mode http, as Slack's Bolt serves it:
// slash commands, interactivity and the Events API all post here.
const EventsPath = "/slack/events"

// MaxSkew is how far a request's X-Slack-Request-Timestamp may be from now.
const MaxSkew = 5 * time.Minute

// maxBody bounds a delivery's body. The largest Slack sends is a
// block_actions interaction carrying the message it came from: up to 50
// blocks of 3,000 characters, form-encoded, about 450 KiB. (opsbot serve's
// listener caps every route's body at the same size, and the bodies read
// at once.)
const maxBody = 512 << 10

// Verification errors, each answered 401.
var (
	ErrBadSignature = errors.New("bad X-Slack-Signature")
	ErrStale        = errors.New("X-Slack-Request-Timestamp more than 5 minutes away")
)

// Verify checks a delivery's signature: X-Slack-Signature must be "v0=" and
// the hex HMAC-SHA256, keyed with the signing secret, of
// "v0:TIMESTAMP:BODY", compared in constant time, and the timestamp within
// MaxSkew of now.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	if err := checkHeaders(h, now); err != nil {
		return err
	}
	if !hmac.Equal([]byte(Sign(secret, h.Get("X-Slack-Request-Timestamp"), body)), []byte(h.Get("X-Slack-Signature"))) {
		return ErrBadSignature
	}
	return nil
}

// checkHeaders checks what can be checked before the body is read: a
// signature is there, and the timestamp is within MaxSkew of now.
func checkHeaders(h http.Header, now time.Time) error {
	if !strings.HasPrefix(h.Get("X-Slack-Signature"), "v0=") {
		return fmt.Errorf("%w: no v0 X-Slack-Signature", ErrBadSignature)
	}
	ts, err := strconv.ParseInt(h.Get("X-Slack-Request-Timestamp"), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: no valid X-Slack-Request-Timestamp", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > MaxSkew || d < -MaxSkew {
		return ErrStale
	}
	return nil
}

// rejectReason names a verification error for opsbot_http_rejected_total.
func rejectReason(err error) string {
	switch {
	case errors.Is(err, ErrStale):
		return "stale_timestamp"
	case strings.Contains(err.Error(), "no v0") || strings.Contains(err.Error(), "no valid"):
		return "no_signature"
	}
	return "bad_signature"
}

// Sign returns the X-Slack-Signature of body sent at timestamp ts (Unix
// seconds, as written in X-Slack-Request-Timestamp).
func Sign(secret, ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + ts + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// Routes is bot.HTTPAdapter: POST /slack/events. Before Run has checked the
// token it answers 503; in socket mode, 404.
func (a *Adapter) Routes() map[string]http.Handler {
	return map[string]http.Handler{"POST " + EventsPath: http.HandlerFunc(a.serveEvents)}
}

// serveEvents is POST /slack/events: a delivery is verified (signed, not
// stale), then handed to the door as an Events API event (JSON) or as an
// interaction or a slash command (a form).
func (a *Adapter) serveEvents(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Mode != config.SlackModeHTTP {
		http.Error(w, "opsbot's Slack adapter runs in socket mode (slack.mode)", http.StatusNotFound)
		return
	}
	ref := a.in.Load()
	if ref == nil {
		http.Error(w, "opsbot's Slack adapter is not running yet", http.StatusServiceUnavailable)
		return
	}
	body, ok := a.verifiedBody(w, r)
	if !ok {
		return
	}
	// The door claims each delivery in the store, whichever opsbot process
	// gets it: a replay of this one (the same signed timestamp and body)
	// runs nothing and is answered 409. Events are claimed by event id, so
	// Slack's own retries (X-Slack-Retry-Num, signed anew) run once too and
	// are answered 200 (else Slack would retry again).
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		a.serveEventsAPI(w, r, ref.in, body)
		return
	}
	a.serveForm(w, r, ref.in, body, deliveryKey(r.Header.Get("X-Slack-Request-Timestamp"), body))
}

// verifiedBody returns the body of a delivery signed with the signing
// secret, sent within MaxSkew of now. Otherwise it answers the request
// itself (401, or 400 for a body it cannot read), counts the refusal
// (Options.Reject: refusals are not logged one by one), and returns false.
// Unsigned or stale deliveries are refused before their body is read, so
// they hold nothing at opsbot serve's listener, which admits a body when
// it is first read; a body the listener refuses there it answers and
// counts itself (bot.ErrBodyRefused).
func (a *Adapter) verifiedBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	now := a.now()
	if err := checkHeaders(r.Header, now); err != nil {
		a.reject(rejectReason(err))
		// Connection: close, so that net/http answers at once instead of
		// reading the unread body first to keep the connection.
		w.Header().Set("Connection", "close")
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if errors.Is(err, bot.ErrBodyRefused) {
		return nil, false // the listener answered and counted it (too slow, too many from one address...)
	}
	if err != nil {
		a.reject("bad_body")
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if err := Verify(a.cfg.SigningSecret.Value(), r.Header, body, now); err != nil {
		a.reject(rejectReason(err))
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return nil, false
	}
	return body, true
}

// serveEventsAPI answers a verified Events API delivery: Slack's URL
// verification gets its challenge back; an event is handed to the door,
// which claims it by its event id, and acked (the answer follows through
// the Web API).
func (a *Adapter) serveEventsAPI(w http.ResponseWriter, r *http.Request, in bot.Inbound, body []byte) {
	var env struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	if env.Type == slackevents.URLVerification {
		writeJSON(w, map[string]string{"challenge": env.Challenge})
		return
	}
	ev, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken())
	if err != nil {
		http.Error(w, "bad event: "+err.Error(), http.StatusBadRequest)
		return
	}
	if a.event(r.Context(), in, ev) {
		a.replayed(w, r)
		return
	}
	w.WriteHeader(http.StatusOK) // acked; the answer follows through the Web API
}

// serveForm answers a verified form delivery: an interaction (a click),
// acked with the answer following through its response_url, or a slash
// command, answered in the response. The door claims it as delivery.
func (a *Adapter) serveForm(w http.ResponseWriter, r *http.Request, in bot.Inbound, body []byte, delivery string) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	switch {
	case form.Get("payload") != "":
		var cb slack.InteractionCallback
		if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
			http.Error(w, "bad interaction payload: "+err.Error(), http.StatusBadRequest)
			return
		}
		if a.click(ctx, in, cb, delivery) {
			a.replayed(w, r)
			return
		}
		w.WriteHeader(http.StatusOK) // acked; the answer follows through response_url
	case form.Get("command") != "":
		sc := slack.SlashCommand{ChannelID: form.Get("channel_id"), ChannelName: form.Get("channel_name"),
			UserID: form.Get("user_id"), UserName: form.Get("user_name"), Command: form.Get("command"),
			Text: form.Get("text"), ResponseURL: form.Get("response_url"), TeamID: form.Get("team_id")}
		m := a.slash(ctx, in, sc, delivery)
		if m == nil {
			a.replayed(w, r)
			return
		}
		writeJSON(w, m)
	default:
		http.Error(w, "neither a slash command nor an interaction", http.StatusBadRequest)
	}
}

// replayed answers a delivery the door handled before: 200 to one of
// Slack's own retries (X-Slack-Retry-Num), else Slack would retry again;
// 409 to anything else (a replay).
func (a *Adapter) replayed(w http.ResponseWriter, r *http.Request) {
	retry := r.Header.Get("X-Slack-Retry-Num") != ""
	a.log.Warn("refused a delivery handled before", "remote", r.RemoteAddr, "retry", retry)
	if retry {
		w.WriteHeader(http.StatusOK)
		return
	}
	http.Error(w, "replayed delivery: already handled", http.StatusConflict)
}

// deliveryKey is the door's key of an HTTP delivery: a digest of its signed
// timestamp and body, which a replay repeats exactly.
func deliveryKey(ts string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(ts + ":"))
	h.Write(body)
	return "http:" + hex.EncodeToString(h.Sum(nil)[:16])
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
