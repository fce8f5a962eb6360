package slack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"
)

// fakeSlack is slack-go's slacktest server (a real HTTP server speaking the
// Web API on loopback) with the handlers it lacks added and the ones that do
// not record replaced, through Binders (slacktest registers its built-ins
// after them and ignores a pattern registered twice):
//   - chat.postMessage answers a unique "sec.micros" ts (slacktest's own
//     answers whole seconds, so a root and its thread would share one) and
//     records the message; it does not push it to the RTM socket;
//   - chat.update, chat.postEphemeral, reactions.add and usergroups.list;
//   - the two-step file upload: files.getUploadURLExternal hands out an
//     upload URL on this same server (slack-go sends the token only to the
//     API URL's host), which records the bytes, and files.completeUploadExternal
//     shares them into a channel or thread;
//   - /response/ stands for the response_urls Slack hands out.
//
// Every call is counted by method, with the time it arrived.
type fakeSlack struct {
	t   testing.TB
	srv *slacktest.Server

	mu        sync.Mutex
	seq       int64
	msgs      []fakeMsg            // chat.postMessage, in order
	edits     map[string][]fakeMsg // chat.update, by ts
	ephemeral []fakeMsg
	reactions []fakeReaction
	uploads   map[string][]byte // by file id
	files     []fakeFile        // completed uploads
	responses []fakeResponse    // posts to response_urls
	calls     []fakeCall
	groups    []slack.UserGroup
	limit     map[string]int // method -> 429s still to answer
	fail      map[string]int // method -> failures (HTTP 500) still to answer
	authErr   string         // auth.test's error, if any
	acks      []socketAck    // what Socket Mode clients sent back
	envelopes chan string    // what to send to the Socket Mode client
}

type socketAck struct {
	EnvelopeID string          `json:"envelope_id"`
	Payload    json.RawMessage `json:"payload"`
}

type fakeMsg struct {
	At                        time.Time
	Channel, TS, Thread, User string
	Text                      string
	Blocks                    json.RawMessage
}

type fakeReaction struct{ Name, Channel, TS string }

type fakeFile struct {
	ID, Title, Channel, Thread, Comment string
	Data                                []byte
}

type fakeResponse struct {
	Path string
	Msg  slack.WebhookMessage
	Raw  string
}

type fakeCall struct {
	Method string
	At     time.Time
}

func newFakeSlack(t testing.TB) *fakeSlack {
	f := &fakeSlack{t: t, edits: map[string][]fakeMsg{}, uploads: map[string][]byte{}, limit: map[string]int{}, fail: map[string]int{},
		envelopes: make(chan string, 64)}
	bind := func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", f.record("chat.postMessage", f.postMessage))
		c.Handle("/chat.update", f.record("chat.update", f.update))
		c.Handle("/chat.postEphemeral", f.record("chat.postEphemeral", f.postEphemeral))
		c.Handle("/reactions.add", f.record("reactions.add", f.reactionAdd))
		c.Handle("/usergroups.list", f.record("usergroups.list", f.usergroupsList))
		c.Handle("/files.getUploadURLExternal", f.record("files.getUploadURLExternal", f.getUploadURL))
		c.Handle("/files.completeUploadExternal", f.record("files.completeUploadExternal", f.completeUpload))
		c.Handle("/upload/", f.record("upload", f.upload))
		c.Handle("/response/", f.record("response_url", f.response))
		c.Handle("/ws", f.socket)
		c.Handle("/auth.test", f.record("auth.test", func(w http.ResponseWriter, _ *http.Request, _ url.Values) {
			f.mu.Lock()
			bad := f.authErr
			f.mu.Unlock()
			if bad != "" {
				writeErr(w, bad)
				return
			}
			writeOK(w, map[string]any{"user_id": "U0BOT", "bot_id": "B0BOT", "team_id": "T0TEAM", "user": "opsbot"})
		}))
	}
	f.srv = slacktest.NewTestServer(bind)
	f.srv.Start()
	t.Cleanup(f.srv.Stop)
	return f
}

// url is the Web API base to configure as slack.api_url.
func (f *fakeSlack) url() string { return f.srv.GetAPIURL() }

// record wraps a handler: it counts the call, answers 429 while a limit is
// set for the method, and hands the handler the form (or nothing for JSON).
func (f *fakeSlack) record(method string, h func(http.ResponseWriter, *http.Request, url.Values)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls = append(f.calls, fakeCall{Method: method, At: time.Now()})
		limited, failed := f.limit[method] > 0, f.fail[method] > 0 && f.limit[method] == 0
		if limited {
			f.limit[method]--
		}
		if failed {
			f.fail[method]--
		}
		f.mu.Unlock()
		if failed {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		if limited {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		var form url.Values
		if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			if err := r.ParseForm(); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			form = r.PostForm
		}
		h(w, r, form)
	}
}

func writeOK(w http.ResponseWriter, fields map[string]any) {
	out := map[string]any{"ok": true}
	for k, v := range fields {
		out[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// inject makes the next n calls of method answer 429 (Retry-After: 1 s)
// when limited, else fail with HTTP 500.
func (f *fakeSlack) inject(method string, n int, limited bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if limited {
		f.limit[method] += n
	} else {
		f.fail[method] += n
	}
}

// ts hands out unique, increasing message timestamps.
func (f *fakeSlack) ts() string {
	now := time.Now()
	f.seq++
	return fmt.Sprintf("%d.%06d", now.Unix(), (int64(now.Nanosecond()/1000)+f.seq)%1000000)
}

func msgOf(form url.Values) fakeMsg {
	return fakeMsg{At: time.Now(), Channel: form.Get("channel"), TS: form.Get("ts"), Thread: form.Get("thread_ts"),
		User: form.Get("user"), Text: form.Get("text"), Blocks: json.RawMessage(form.Get("blocks"))}
}

func (f *fakeSlack) postMessage(w http.ResponseWriter, _ *http.Request, form url.Values) {
	m := msgOf(form)
	f.mu.Lock()
	m.TS = f.ts()
	f.msgs = append(f.msgs, m)
	f.mu.Unlock()
	writeOK(w, map[string]any{"channel": m.Channel, "ts": m.TS})
}

func (f *fakeSlack) update(w http.ResponseWriter, _ *http.Request, form url.Values) {
	m := msgOf(form)
	f.mu.Lock()
	known := false
	for _, p := range f.msgs {
		known = known || (p.TS == m.TS && p.Channel == m.Channel)
	}
	if known {
		f.edits[m.TS] = append(f.edits[m.TS], m)
	}
	f.mu.Unlock()
	if !known {
		writeErr(w, "message_not_found")
		return
	}
	writeOK(w, map[string]any{"channel": m.Channel, "ts": m.TS, "text": m.Text})
}

func writeErr(w http.ResponseWriter, code string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": code})
}

func (f *fakeSlack) postEphemeral(w http.ResponseWriter, _ *http.Request, form url.Values) {
	m := msgOf(form)
	f.mu.Lock()
	m.TS = f.ts()
	f.ephemeral = append(f.ephemeral, m)
	f.mu.Unlock()
	writeOK(w, map[string]any{"message_ts": m.TS})
}

func (f *fakeSlack) reactionAdd(w http.ResponseWriter, _ *http.Request, form url.Values) {
	f.mu.Lock()
	f.reactions = append(f.reactions, fakeReaction{Name: form.Get("name"), Channel: form.Get("channel"), TS: form.Get("timestamp")})
	f.mu.Unlock()
	writeOK(w, nil)
}

func (f *fakeSlack) usergroupsList(w http.ResponseWriter, _ *http.Request, _ url.Values) {
	f.mu.Lock()
	groups := append([]slack.UserGroup(nil), f.groups...)
	f.mu.Unlock()
	writeOK(w, map[string]any{"usergroups": groups})
}

func (f *fakeSlack) getUploadURL(w http.ResponseWriter, _ *http.Request, form url.Values) {
	f.mu.Lock()
	f.seq++
	id := "F" + strconv.FormatInt(f.seq, 10)
	f.mu.Unlock()
	if form.Get("filename") == "" || form.Get("length") == "" {
		writeErr(w, "invalid_arguments")
		return
	}
	writeOK(w, map[string]any{"upload_url": f.srv.GetAPIURL() + "upload/" + id, "file_id": id})
}

func (f *fakeSlack) upload(w http.ResponseWriter, r *http.Request, _ url.Values) {
	id := strings.TrimPrefix(r.URL.Path, "/upload/")
	file, _, err := r.FormFile("file")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(file)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.uploads[id] = b
	f.mu.Unlock()
	_, _ = io.WriteString(w, "OK - "+strconv.Itoa(len(b)))
}

func (f *fakeSlack) completeUpload(w http.ResponseWriter, _ *http.Request, form url.Values) {
	var files []struct{ ID, Title string }
	if err := json.Unmarshal([]byte(form.Get("files")), &files); err != nil {
		writeErr(w, "invalid_arguments")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]string
	for _, file := range files {
		data, ok := f.uploads[file.ID]
		if !ok {
			writeErr(w, "file_not_found")
			return
		}
		f.files = append(f.files, fakeFile{ID: file.ID, Title: file.Title, Channel: form.Get("channel_id"),
			Thread: form.Get("thread_ts"), Comment: form.Get("initial_comment"), Data: data})
		out = append(out, map[string]string{"id": file.ID, "title": file.Title})
	}
	writeOK(w, map[string]any{"files": out})
}

func (f *fakeSlack) response(w http.ResponseWriter, r *http.Request, _ url.Values) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m slack.WebhookMessage
	if err := json.Unmarshal(b, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.responses = append(f.responses, fakeResponse{Path: r.URL.Path, Msg: m, Raw: string(b)})
	f.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

// snapshot copies what the server recorded.
type fakeState struct {
	msgs      []fakeMsg
	edits     map[string][]fakeMsg
	ephemeral []fakeMsg
	reactions []fakeReaction
	files     []fakeFile
	responses []fakeResponse
	calls     []fakeCall
}

func (f *fakeSlack) state() fakeState {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := fakeState{msgs: append([]fakeMsg(nil), f.msgs...), edits: map[string][]fakeMsg{},
		ephemeral: append([]fakeMsg(nil), f.ephemeral...), reactions: append([]fakeReaction(nil), f.reactions...),
		files: append([]fakeFile(nil), f.files...), responses: append([]fakeResponse(nil), f.responses...),
		calls: append([]fakeCall(nil), f.calls...)}
	for k, v := range f.edits {
		s.edits[k] = append([]fakeMsg(nil), v...)
	}
	return s
}

// roots are the channel messages that are not in a thread.
func (s fakeState) roots(channel string) []fakeMsg {
	var out []fakeMsg
	for _, m := range s.msgs {
		if m.Channel == channel && m.Thread == "" {
			out = append(out, m)
		}
	}
	return out
}

// thread is the messages posted under ts.
func (s fakeState) thread(ts string) []fakeMsg {
	var out []fakeMsg
	for _, m := range s.msgs {
		if m.Thread == ts {
			out = append(out, m)
		}
	}
	return out
}

// blocksText joins the text of a message's blocks.
func blocksText(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	if len(raw) == 0 {
		return ""
	}
	var bs slack.Blocks
	if err := json.Unmarshal(raw, &bs); err != nil {
		t.Fatalf("blocks %s: %v", raw, err)
	}
	var parts []string
	for _, b := range bs.BlockSet {
		switch b := b.(type) {
		case *slack.SectionBlock:
			if b.Text != nil {
				parts = append(parts, b.Text.Text)
			}
		case *slack.ContextBlock:
			for _, e := range b.ContextElements.Elements {
				if o, ok := e.(*slack.TextBlockObject); ok {
					parts = append(parts, o.Text)
				}
			}
		}
	}
	return strings.Join(parts, "\n")
}

// count is the number of calls of method.
func (s fakeState) count(method string) int {
	n := 0
	for _, c := range s.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// blocksOf is the text a slash command's or response_url's message shows.
func blocksOf(t testing.TB, m slack.WebhookMessage) string {
	t.Helper()
	if m.Blocks == nil {
		return m.Text
	}
	raw, err := json.Marshal(m.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	return blocksText(t, raw)
}

// socket is the Socket Mode WebSocket (apps.connections.open hands out its
// URL). It replaces slacktest's RTM socket, which spins on a read error after
// the client goes and needs its unbuffered feeds drained: this one says
// hello, sends the queued envelopes, pings as Slack does, and records every
// ack until the client goes.
func (f *fakeSlack) socket(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	done := make(chan struct{})
	defer close(done)
	var wmu sync.Mutex
	write := func(s string) error {
		wmu.Lock()
		defer wmu.Unlock()
		return c.WriteMessage(websocket.TextMessage, []byte(s))
	}
	if write(`{"type":"hello","num_connections":1}`) != nil {
		return
	}
	go func() {
		ping := time.NewTicker(5 * time.Second)
		defer ping.Stop()
		for {
			select {
			case <-done:
				return
			case e := <-f.envelopes:
				if write(e) != nil {
					return
				}
			case <-ping.C:
				wmu.Lock()
				err := c.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
				wmu.Unlock()
				if err != nil {
					return
				}
			}
		}
	}()
	for {
		_, b, err := c.ReadMessage()
		if err != nil {
			return
		}
		var a socketAck
		if json.Unmarshal(b, &a) == nil && a.EnvelopeID != "" {
			f.mu.Lock()
			f.acks = append(f.acks, a)
			f.mu.Unlock()
		}
	}
}

// send queues a Socket Mode envelope for the connected client.
func (f *fakeSlack) send(envelopeID, typ string, payload any) {
	b, err := json.Marshal(map[string]any{"envelope_id": envelopeID, "type": typ, "payload": payload,
		"accepts_response_payload": typ == "slash_commands"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.envelopes <- string(b)
}

// ack returns the acks of envelopeID so far.
func (f *fakeSlack) ack(envelopeID string) []socketAck {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []socketAck
	for _, a := range f.acks {
		if a.EnvelopeID == envelopeID {
			out = append(out, a)
		}
	}
	return out
}
