package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slack-go/slack"

	slackad "github.com/opsbot/opsbot/bot/slack"
	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/internal/testrun"
)

const (
	e2eSigningSecret = "e2e-signing-secret-0123456789abcdef"
	e2eChannel       = "C0OPS"
	e2eOperator      = "U0OLGA"
)

// slackServer is the Slack stand-in (internal/slackfake: slack-go's
// slacktest server with what opsbot calls added) and what serve's tests read
// of it. No Slack workspace can be reached from tests.
type slackServer struct{ *slackfake.Server }

type slackMsg = slackfake.Msg

func newSlackServer(t testing.TB) *slackServer { return &slackServer{slackfake.New(t)} }

// slackJob is what Slack shows of one job: its root message, the root's
// edits, the messages of its thread, the files shared into it and the
// reactions on the root.
type slackJob struct {
	root      slackMsg
	edits     []slackMsg
	thread    []slackMsg
	files     []string
	reactions []string
	calls     int // Web API calls of the whole run so far
}

// job reads back the first root message in channel and what hangs off it.
func (f *slackServer) job(channel string) (slackJob, bool) {
	st := f.State()
	roots := st.Roots(channel)
	if len(roots) == 0 {
		return slackJob{}, false
	}
	j := slackJob{root: roots[0], calls: len(st.Calls)}
	j.edits = st.Edits[j.root.TS]
	j.thread = st.Thread(j.root.TS)
	for _, file := range st.Files {
		if file.Thread == j.root.TS {
			j.files = append(j.files, file.Title)
		}
	}
	for _, r := range st.Reactions {
		if r.TS == j.root.TS {
			j.reactions = append(j.reactions, r.Name)
		}
	}
	return j, true
}

// total is the number of Web API calls so far.
func (f *slackServer) total() int { return len(f.State().Calls) }

// roots counts the messages in channel that are not in a thread.
func (f *slackServer) roots(channel string) int { return len(f.State().Roots(channel)) }

// last is the text the root shows now: its last edit, or itself.
func (j slackJob) last(t *testing.T) string {
	if len(j.edits) > 0 {
		return slackText(t, j.edits[len(j.edits)-1])
	}
	return slackText(t, j.root)
}

// slackText is the text of a message's blocks (its text when it has none).
func slackText(t *testing.T, m slackMsg) string {
	t.Helper()
	if len(m.Blocks) == 0 {
		return m.Text
	}
	return slackfake.BlocksText(t, m.Blocks)
}

// slackSection is the config's slack section in HTTP mode against api;
// the signing secret comes from OPSBOT_E2E_SIGNING (slackEnv).
func slackSection(api *slackServer) string {
	return `slack:
  enabled: true
  mode: http
  bot_token: xoxb-e2e-token
  signing_secret: "${OPSBOT_E2E_SIGNING}"
  api_url: ` + api.URL() + `
  channel: ` + e2eChannel + `
  channels: [` + e2eChannel + `]
`
}

// socketSection is slackSection in Socket Mode (no signing secret, an app
// token; the stand-in's WebSocket).
func socketSection(api *slackServer) string {
	return `slack:
  enabled: true
  mode: socket
  bot_token: xoxb-e2e-token
  app_token: xapp-e2e-token
  api_url: ` + api.URL() + `
  channels: [` + e2eChannel + `]
`
}

var slackEnv = []string{"OPSBOT_E2E_SIGNING=" + e2eSigningSecret}

// startSlackServe runs `opsbot serve --config FILE --lab` with a config of
// store, http, auth and section (slackSection's, or another), and waits
// until /readyz answers 200 (Slack connected). It returns the process and
// its HTTP base URL.
func startSlackServe(t testing.TB, section string) (*opsbotProc, string) {
	t.Helper()
	cfg := writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"), `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
auth:
  default_role: none
  users: {"slack:`+e2eOperator+`": operator}
`+section)
	return readySlackServe(t, cfg, "--lab")
}

// readySlackServe runs `opsbot serve --config cfg [extra...]` and waits
// until /readyz answers 200.
func readySlackServe(t testing.TB, cfg string, extra ...string) (*opsbotProc, string) {
	t.Helper()
	p := startServe(t, "", slackEnv, append([]string{"serve", "--config", cfg}, extra...)...)
	base := serveURL(t, p)
	pollServe(t, p, time.Minute, "/readyz 200 with Slack connected", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	return p, base
}

// slackDelivery is one HTTP delivery to POST /slack/events, as Slack signs it.
type slackDelivery struct{ body, ts, sig string }

// signedSlash is the slash command `command text` by the operator in the
// channel, signed with secret at the given time.
func signedSlash(secret string, at time.Time, command, text string) slackDelivery {
	return signedSlashIn(secret, at, e2eChannel, command, text)
}

// signedSlashIn is signedSlash in another channel.
func signedSlashIn(secret string, at time.Time, channel, command, text string) slackDelivery {
	body := url.Values{"command": {command}, "text": {text}, "user_id": {e2eOperator}, "user_name": {"olga"},
		"channel_id": {channel}, "team_id": {"T0TEAM"}, "trigger_id": {strconv.FormatInt(time.Now().UnixNano(), 10)},
		"response_url": {"http://127.0.0.1:1/response/unused"}}.Encode()
	ts := strconv.FormatInt(at.Unix(), 10)
	return slackDelivery{body: body, ts: ts, sig: slackad.Sign(secret, ts, []byte(body))}
}

// post sends d to serve's /slack/events and returns the answer's status and body.
func (d slackDelivery) post(t testing.TB, base string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+slackad.EventsPath, strings.NewReader(d.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", d.ts)
	req.Header.Set("X-Slack-Signature", d.sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkSlackMtpSteps waits until Slack shows job #1, `mtp steps 10` sent
// at t0, ended, and checks what it shows: one root message in the channel,
// queued, edited in place (running, then ✅ succeeded with tok/s), the
// steps in its thread, the result block (tok/s, acceptance) and the ✅
// reaction. It returns the job as Slack shows it and how long after t0 it
// showed it done.
func checkSlackMtpSteps(t *testing.T, p *opsbotProc, api *slackServer, t0 time.Time) (slackJob, time.Duration) {
	t.Helper()
	var j slackJob
	pollServe(t, p, 2*time.Minute, "the job's final status, result and reaction in Slack", func() bool {
		var ok bool
		j, ok = api.job(e2eChannel)
		if !ok || len(j.reactions) == 0 {
			return false
		}
		for _, m := range j.thread {
			if strings.Contains(slackText(t, m), "Result of #1") {
				return strings.Contains(j.last(t), "succeeded")
			}
		}
		return false
	})
	took := time.Since(t0)
	if s := slackText(t, j.root); !strings.Contains(s, "#1 `mtp steps 10") || !strings.Contains(s, "queued") {
		t.Errorf("root message: %q; want job #1 queued", s)
	}
	if n := api.roots(e2eChannel); n != 1 {
		t.Errorf("%d root messages in the channel, want 1: a refused or replayed delivery started a job", n)
	}
	running := 0
	for _, e := range j.edits {
		if strings.Contains(slackText(t, e), "running") {
			running++
		}
	}
	if running == 0 {
		t.Errorf("none of the root's %d edits shows the job running", len(j.edits))
	}
	if final := j.last(t); !strings.HasPrefix(final, "✅ #1 `mtp steps 10") || !strings.Contains(final, "tok/s") {
		t.Errorf("final status: %q; want ✅, succeeded, with tok/s", final)
	}
	var thread, result strings.Builder
	for _, m := range j.thread {
		s := slackText(t, m)
		thread.WriteString(s + "\n")
		if strings.Contains(s, "Result of #1") {
			result.WriteString(s)
		}
	}
	for _, want := range []string{"stop", "write unit", "start", "ready", "bench"} {
		if !strings.Contains(thread.String(), want) {
			t.Errorf("the thread has no %q step:\n%s", want, thread.String())
		}
	}
	for _, want := range []string{"tok/s", "accept"} {
		if !strings.Contains(result.String(), want) {
			t.Errorf("the result block lacks %q:\n%s", want, result.String())
		}
	}
	if len(j.reactions) != 1 || j.reactions[0] != "white_check_mark" {
		t.Errorf("reactions on the root: %v; want [white_check_mark]", j.reactions)
	}
	if testing.Verbose() {
		for _, m := range append([]slackMsg{j.root}, append(j.edits, j.thread...)...) {
			t.Logf("%s thread=%s\n%s", m.TS, m.Thread, slackText(t, m))
		}
	}
	return j, took
}

// TestServeSlackMtpSteps: `opsbot serve --lab` with Slack in HTTP mode, as
// a process of its own: /readyz is 200 once auth.test answered; a slash
// command signed with another secret, or 10 minutes ago, is answered 401;
// a signed `/mtp steps 10` is acked with the job's id and runs the lab job,
// and the same delivery replayed is answered 409 and runs nothing;
// Slack then holds one root message in the channel, edited in place
// (running, then succeeded with tok/s), the steps in its thread, the result
// block (tok/s, acceptance) and the ✅ reaction; SIGTERM then exits 0.
func TestServeSlackMtpSteps(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	api := newSlackServer(t)
	p, base := startSlackServe(t, slackSection(api))

	if code, body := signedSlash("not-the-secret", time.Now(), "/mtp", "steps 10").post(t, base); code != http.StatusUnauthorized {
		t.Fatalf("a badly signed slash command: %d %s, want 401", code, body)
	}
	if code, body := signedSlash(e2eSigningSecret, time.Now().Add(-10*time.Minute), "/mtp", "steps 10").post(t, base); code != http.StatusUnauthorized {
		t.Fatalf("a slash command signed 10 minutes ago: %d %s, want 401", code, body)
	}
	d := signedSlash(e2eSigningSecret, time.Now(), "/mtp", "steps 10")
	before := api.total()
	t0 := time.Now()
	code, body := d.post(t, base)
	ackTook := time.Since(t0)
	var ack slack.WebhookMessage
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ack) != nil || !strings.Contains(ack.Text, "#1 queued: `mtp steps 10") {
		t.Fatalf("signed /mtp steps 10: %d %s; want 200 and the job's id", code, body)
	}
	if ack.ResponseType != "ephemeral" {
		t.Errorf("ack response_type %q, want ephemeral", ack.ResponseType)
	}
	if code, body := d.post(t, base); code != http.StatusConflict {
		t.Errorf("the same delivery replayed: %d %s, want 409", code, body)
	}

	j, took := checkSlackMtpSteps(t, p, api, t0)
	t.Logf("HTTP mode: ack %s; job shown done in Slack %s after the command; %d Slack calls for the job (%d edits, %d thread messages, %d files)",
		ackTook.Round(time.Millisecond), took.Round(time.Millisecond), j.calls-before, len(j.edits), len(j.thread), len(j.files))

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}

// click is a signed block_actions delivery: user clicks the button with
// actionID; the answer goes to the response_url /response/NAME.
func click(api *slackServer, actionID, user, name string) slackDelivery {
	payload, _ := json.Marshal(map[string]any{
		"type":         "block_actions",
		"trigger_id":   strconv.FormatInt(time.Now().UnixNano(), 10),
		"user":         map[string]string{"id": user},
		"channel":      map[string]string{"id": e2eChannel},
		"response_url": api.URL() + "response/" + name,
		"actions":      []map[string]string{{"action_id": actionID, "block_id": "opsbot_actions", "type": "button", "value": actionID}},
	})
	body := url.Values{"payload": {string(payload)}}.Encode()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	return slackDelivery{body: body, ts: ts, sig: slackad.Sign(e2eSigningSecret, ts, []byte(body))}
}

// response waits for the n-th (1-based) answer posted to /response/NAME.
func (f *slackServer) response(t *testing.T, p *opsbotProc, name string, n int) slack.WebhookMessage {
	t.Helper()
	var m slack.WebhookMessage
	pollServe(t, p, 10*time.Second, fmt.Sprintf("answer #%d to /response/%s", n, name), func() bool {
		var mine []slack.WebhookMessage
		for _, r := range f.State().Responses {
			if r.Path == "/response/"+name {
				mine = append(mine, r.Msg)
			}
		}
		if len(mine) < n {
			return false
		}
		m = mine[n-1]
		return true
	})
	return m
}

// TestServeSlackButtons: through `opsbot serve --lab` in HTTP mode,
// `/gpu recover` is previewed to the operator with Confirm and Abort; a
// Confirm clicked by a user without a role is refused to that user only
// and starts nothing; the operator's Confirm queues the job with a Cancel
// button, and the operator's Cancel ends it cancelled, which its root
// message in Slack shows.
func TestServeSlackButtons(t *testing.T) {
	t.Parallel()
	api := newSlackServer(t)
	p, base := startSlackServe(t, slackSection(api))
	code, body := signedSlash(e2eSigningSecret, time.Now(), "/gpu", "recover").post(t, base)
	var preview slack.WebhookMessage
	if code != http.StatusOK || json.Unmarshal([]byte(body), &preview) != nil {
		t.Fatalf("/gpu recover: %d %s", code, body)
	}
	btn := slackfake.Buttons(preview)
	if btn["Confirm"] == "" || btn["Abort"] == "" || preview.ResponseType != "ephemeral" {
		t.Fatalf("preview %s; want ephemeral with Confirm and Abort", body)
	}
	if code, body := click(api, btn["Confirm"], "U0NOBODY", "stranger").post(t, base); code != http.StatusOK {
		t.Fatalf("a stranger's click: %d %s", code, body)
	}
	if m := api.response(t, p, "stranger", 1); m.ReplaceOriginal || m.ResponseType != "ephemeral" {
		t.Errorf("a stranger's Confirm: %+v; want refused to them only, the preview kept", m)
	}
	if n := api.roots(e2eChannel); n != 0 {
		t.Fatalf("a stranger's Confirm started a job: %d root messages", n)
	}
	if code, body := click(api, btn["Confirm"], e2eOperator, "olga").post(t, base); code != http.StatusOK {
		t.Fatalf("the operator's Confirm: %d %s", code, body)
	}
	queued := api.response(t, p, "olga", 1)
	cancel := slackfake.Buttons(queued)["Cancel"]
	if !queued.ReplaceOriginal || !strings.Contains(queued.Text, "#1 queued") || cancel == "" {
		t.Fatalf("the operator's Confirm: %+v; want the preview replaced by job #1 queued, with Cancel", queued)
	}
	if code, body := click(api, cancel, e2eOperator, "olga").post(t, base); code != http.StatusOK {
		t.Fatalf("the operator's Cancel: %d %s", code, body)
	}
	pollServe(t, p, time.Minute, "job #1's root shows it cancelled", func() bool {
		j, ok := api.job(e2eChannel)
		return ok && strings.Contains(j.last(t), "cancelled")
	})
	if m := api.response(t, p, "olga", 2); !strings.Contains(strings.ToLower(m.Text), "cancel") {
		t.Errorf("Cancel answered %+v", m)
	}
	j, _ := api.job(e2eChannel)
	t.Logf("cancelled job's root: %s", j.last(t))
}

// TestServeSlackReadyzFollowsSlack: while Slack does not answer auth.test,
// `opsbot serve --lab`'s /readyz is 503 and says why, and a signed slash
// command is answered 503 and runs nothing; once auth.test answers, /readyz
// is 200 and the same kind of command runs.
func TestServeSlackReadyzFollowsSlack(t *testing.T) {
	t.Parallel()
	api := newSlackServer(t)
	api.SetDown("auth.test", true)
	cfg := writeFile(t, filepath.Join(t.TempDir(), "opsbot.yaml"), `store: {path: opsbot.db}
http: {listen: "127.0.0.1:0"}
auth: {users: {"slack:`+e2eOperator+`": operator}}
`+slackSection(api))
	p := startServe(t, "", slackEnv, "serve", "--config", cfg, "--lab")
	base := serveURL(t, p)
	pollServe(t, p, time.Minute, "auth.test tried and failed", func() bool {
		return api.State().Count("auth.test") >= 2
	})
	code, body := httpGet(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: slack: connecting to Slack") {
		t.Fatalf("/readyz while Slack does not answer: %d %q; want 503 naming Slack", code, body)
	}
	if code, body := signedSlash(e2eSigningSecret, time.Now(), "/gpu", "status").post(t, base); code != http.StatusServiceUnavailable {
		t.Errorf("a slash command while Slack does not answer: %d %s, want 503", code, body)
	}
	api.SetDown("auth.test", false)
	pollServe(t, p, time.Minute, "/readyz 200 once Slack answers", func() bool { code, _ := httpGet(t, base+"/readyz"); return code == 200 })
	if code, body := signedSlash(e2eSigningSecret, time.Now(), "/gpu", "status").post(t, base); code != http.StatusOK || !strings.Contains(body, "#1 queued") {
		t.Fatalf("a slash command once Slack answers: %d %s; want job #1 queued (the refused one ran nothing)", code, body)
	}
}

// TestServeSlackSIGTERMMidJob: SIGTERM to `opsbot serve` (on a lab run by
// the test: its engine loads for an hour, which serve --lab would wait for
// at start) while a `/mtp steps 10` from Slack waits for the engine:
// serve exits 0 within limits.shutdown_grace, and the job's root message
// in Slack, edited one last time, says it was interrupted.
func TestServeSlackSIGTERMMidJob(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	api := newSlackServer(t)
	_, cfg, _ := sigtermLab(t, grace)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.WriteString(f, slackSection(api))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	p, base := readySlackServe(t, cfg)
	if code, body := signedSlash(e2eSigningSecret, time.Now(), "/mtp", "steps 10").post(t, base); code != http.StatusOK || !strings.Contains(body, "#1 queued") {
		t.Fatalf("signed /mtp steps 10: %d %s", code, body)
	}
	pollServe(t, p, time.Minute, "the job waiting for the engine, in Slack", func() bool {
		j, ok := api.job(e2eChannel)
		return ok && strings.Contains(j.last(t), "wait until ready")
	})
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t, 2*grace+10*time.Second)
	took := time.Since(t0)
	if code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
	if took > grace+2*time.Second {
		t.Errorf("exit took %s, more than the grace %s", took, grace)
	}
	j, _ := api.job(e2eChannel)
	if final := j.last(t); !strings.Contains(final, "#1 `mtp steps 10") || !strings.Contains(final, "interrupted") {
		t.Errorf("the root's last state in Slack: %q; want job #1 interrupted", final)
	}
	var thread strings.Builder
	for _, m := range j.thread {
		thread.WriteString(slackText(t, m) + "\n")
	}
	t.Logf("SIGTERM to exit %s (grace %s); last status: %s", took.Round(time.Millisecond), grace, j.last(t))
	if testing.Verbose() {
		t.Logf("thread:\n%s", thread.String())
	}
}

// TestServeSlackSocketModeMtpSteps: the same job through Socket Mode
// (slack.mode: socket, no public URL): /readyz is 200 once the socket is
// connected; the slash command's envelope is acked with the job's id, the
// job runs on the lab and Slack shows the same thread; the envelope
// delivered again (Slack's retry) is acked and runs nothing.
func TestServeSlackSocketModeMtpSteps(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	api := newSlackServer(t)
	p, base := startSlackServe(t, socketSection(api))
	if code, _ := signedSlash(e2eSigningSecret, time.Now(), "/mtp", "steps 10").post(t, base); code != http.StatusNotFound {
		t.Errorf("POST /slack/events in socket mode: %d, want 404", code)
	}
	cmd := map[string]string{"command": "/mtp", "text": "steps 10", "user_id": e2eOperator, "user_name": "olga",
		"channel_id": e2eChannel, "team_id": "T0TEAM", "response_url": api.URL() + "response/socket"}
	before := api.total()
	t0 := time.Now()
	api.Send("env-1", "slash_commands", cmd)
	pollServe(t, p, 10*time.Second, "the slash command's ack", func() bool { return len(api.Ack("env-1")) == 1 })
	ackTook := time.Since(t0)
	var ack slack.WebhookMessage
	if raw := api.Ack("env-1")[0].Payload; json.Unmarshal(raw, &ack) != nil || !strings.Contains(ack.Text, "#1 queued: `mtp steps 10") || ack.ResponseType != "ephemeral" {
		t.Fatalf("ack %s; want the job's id, ephemeral", raw)
	}
	api.Send("env-1", "slash_commands", cmd) // Slack's retry of the same envelope
	pollServe(t, p, 10*time.Second, "the retry's ack", func() bool { return len(api.Ack("env-1")) == 2 })
	j, took := checkSlackMtpSteps(t, p, api, t0)
	if n := api.roots(e2eChannel); n != 1 {
		t.Errorf("%d root messages in the channel, want 1: the retried envelope started a job", n)
	}
	t.Logf("Socket Mode: ack %s; job shown done in Slack %s after the command; %d Slack calls for the job (%d edits, %d thread messages, %d files)",
		ackTook.Round(time.Millisecond), took.Round(time.Millisecond), j.calls-before, len(j.edits), len(j.thread), len(j.files))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("serve after SIGTERM: exit %d\n%s", code, p.out.String())
	}
}

// BenchmarkServeSlackAck200: 200 signed slash commands sent at once to
// `opsbot serve --lab`'s POST /slack/events on loopback (HTTP mode), each
// answered by the real dispatcher in the serve process: `/opsbot help mtp`
// (answered at once, no job) and `/mtp show` (a read-only job queued: a
// job row committed before the ack, then its root message posted to
// Slack). Reports the ack time's p50 and p99 as the sender sees it.
// Figures only: nothing is asserted about time.
//
//	go test -run XXX -bench ServeSlackAck200 -benchtime 1x ./cmd/opsbot
func BenchmarkServeSlackAck200(b *testing.B) {
	api := newSlackServer(b)
	_, base := startSlackServe(b, slackSection(api))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	for _, c := range []struct{ name, command, text string }{{"help", "/opsbot", "help mtp"}, {"mtp-show", "/mtp", "show"}} {
		b.Run(c.name, func(b *testing.B) {
			var all []time.Duration
			for b.Loop() {
				ds := make([]slackDelivery, 200)
				for i := range ds {
					ds[i] = signedSlash(e2eSigningSecret, time.Now(), c.command, c.text)
				}
				lat := make([]time.Duration, len(ds))
				errs := make(chan error, len(ds))
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, d := range ds {
					wg.Go(func() {
						req, err := http.NewRequest(http.MethodPost, base+slackad.EventsPath, strings.NewReader(d.body))
						if err != nil {
							errs <- err
							return
						}
						req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
						req.Header.Set("X-Slack-Request-Timestamp", d.ts)
						req.Header.Set("X-Slack-Signature", d.sig)
						<-start
						t0 := time.Now()
						resp, err := client.Do(req)
						if err != nil {
							errs <- err
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						lat[i] = time.Since(t0)
						if resp.StatusCode != http.StatusOK {
							errs <- fmt.Errorf("%s %s: HTTP %d", c.command, c.text, resp.StatusCode)
						}
					})
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				all = append(all, lat...)
			}
			slices.Sort(all)
			q := func(f float64) time.Duration { return all[min(len(all)-1, int(f*float64(len(all))))] }
			b.ReportMetric(float64(q(0.50).Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(q(0.99).Microseconds())/1000, "ms-p99")
			b.Logf("%d slash commands (%s %s), 200 at once, to opsbot serve: ack p50 %s, p99 %s, max %s",
				len(all), c.command, c.text, q(0.50), q(0.99), all[len(all)-1])
		})
	}
}
