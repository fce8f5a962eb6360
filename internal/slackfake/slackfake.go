// Package slackfake stands in for Slack in tests: slack-go's slacktest
// server (a real HTTP server speaking the Web API on loopback) with what
// opsbot calls and slacktest lacks, or does not record, added. No Slack
// workspace can be reached from tests.
package slackfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"
)

// Server is slack-go's slacktest server (a real HTTP server speaking the
// Web API on loopback) with the handlers it lacks added and the ones that do
// not record replaced, through Binders (slacktest registers its built-ins
// after them and ignores a pattern registered twice):
//   - chat.postMessage answers a unique "sec.micros" ts (slacktest's own
//     answers whole seconds, so a root and its thread would share one) and
//     records the message; it does not push it to the RTM socket;
//   - chat.update, chat.postEphemeral, reactions.add and reactions.remove
//     (which keep the reactions each message shows, answering
//     already_reacted and no_reaction as Slack does), and usergroups.list;
//   - the two-step file upload: files.getUploadURLExternal hands out an
//     upload URL on this same server (slack-go sends the token only to the
//     API URL's host), which records the bytes, and files.completeUploadExternal
//     shares them into a channel or thread;
//   - /response/ stands for the response_urls Slack hands out.
//
// Every call is counted by method, with the time it arrived.
type Server struct {
	t   testing.TB
	srv *slacktest.Server

	mu        sync.Mutex
	seq       int64
	msgs      []Msg            // chat.postMessage, in order
	edits     map[string][]Msg // chat.update, by ts
	ephemeral []Msg
	reactions []Reaction
	shown     map[string][]string // "channel/ts" -> the reactions the message shows, oldest first
	uploads   map[string][]byte   // by file id
	files     []File              // completed uploads
	responses []Response          // posts to response_urls
	calls     []Call
	groups    []slack.UserGroup
	limit     map[string]int  // method -> 429s still to answer
	fail      map[string]int  // method -> failures (HTTP 500) still to answer
	down      map[string]bool // method -> every call fails (HTTP 500)
	authErr   string          // auth.test's error, if any
	acks      []Ack           // what Socket Mode clients sent back
	envelopes chan string     // what to send to the Socket Mode clients (each envelope to one)
	conns     int             // Socket Mode connections opened so far
}

// Ack is what a Socket Mode client sent back for an envelope.
type Ack struct {
	EnvelopeID string          `json:"envelope_id"`
	Payload    json.RawMessage `json:"payload"`
	// Conn numbers the Socket Mode connection that sent it (from 1, in
	// the order they opened): with several clients connected, each
	// envelope goes to one of them, as Slack does.
	Conn int `json:"-"`
}

// Msg is a message as a chat.postMessage, chat.update or chat.postEphemeral
// call sent it (User: an ephemeral's recipient).
type Msg struct {
	At                        time.Time
	Channel, TS, Thread, User string
	Text                      string
	Blocks                    json.RawMessage
}

// Reaction is a reactions.add call that added a reaction.
type Reaction struct{ Name, Channel, TS string }

// File is a completed two-step upload, shared into Channel (Thread).
type File struct {
	ID, Title, Channel, Thread, Comment string
	Data                                []byte
}

// Response is a post to a response_url (Path: /response/NAME).
type Response struct {
	Path string
	Msg  slack.WebhookMessage
	Raw  string
}

// Call is one API call (upload and response_url included), when it came.
type Call struct {
	Method string
	At     time.Time
}

// New starts a Server for the test; it stops when the test ends.
func New(t testing.TB) *Server {
	f := &Server{t: t, edits: map[string][]Msg{}, shown: map[string][]string{}, uploads: map[string][]byte{}, limit: map[string]int{}, fail: map[string]int{}, down: map[string]bool{},
		envelopes: make(chan string, 64)}
	bind := func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", f.record("chat.postMessage", f.postMessage))
		c.Handle("/chat.update", f.record("chat.update", f.update))
		c.Handle("/chat.postEphemeral", f.record("chat.postEphemeral", f.postEphemeral))
		c.Handle("/reactions.add", f.record("reactions.add", f.reactionAdd))
		c.Handle("/reactions.remove", f.record("reactions.remove", f.reactionRemove))
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

// URL is the Web API base to configure as slack.api_url.
func (f *Server) URL() string { return f.srv.GetAPIURL() }

// record wraps a handler: it counts the call, answers 429 while a limit is
// set for the method, and hands the handler the form (or nothing for JSON).
func (f *Server) record(method string, h func(http.ResponseWriter, *http.Request, url.Values)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls = append(f.calls, Call{Method: method, At: time.Now()})
		limited, failed := f.limit[method] > 0, f.down[method] || f.fail[method] > 0 && f.limit[method] == 0
		if limited {
			f.limit[method]--
		}
		if failed && !f.down[method] {
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

// Stop stops the server before the test ends: Slack unreachable.
func (f *Server) Stop() { f.srv.Stop() }

// SetGroups sets what usergroups.list answers.
func (f *Server) SetGroups(groups []slack.UserGroup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups = append([]slack.UserGroup(nil), groups...)
}

// SetAuthError makes auth.test answer {"ok": false, "error": code} (a
// revoked token, say); "" answers ok again.
func (f *Server) SetAuthError(code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authErr = code
}

// SetDown makes every call of method fail with HTTP 500 while down is true
// (Slack unreachable), and clears what Inject queued for it when false.
func (f *Server) SetDown(method string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if down {
		f.down[method] = true
		return
	}
	delete(f.down, method)
	f.fail[method] = 0
}

// Inject makes the next n calls of method answer 429 (Retry-After: 1 s)
// when limited, else fail with HTTP 500.
func (f *Server) Inject(method string, n int, limited bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if limited {
		f.limit[method] += n
	} else {
		f.fail[method] += n
	}
}

// ts hands out unique, increasing message timestamps.
func (f *Server) ts() string {
	now := time.Now()
	f.seq++
	return fmt.Sprintf("%d.%06d", now.Unix(), (int64(now.Nanosecond()/1000)+f.seq)%1000000)
}

func msgOf(form url.Values) Msg {
	return Msg{At: time.Now(), Channel: form.Get("channel"), TS: form.Get("ts"), Thread: form.Get("thread_ts"),
		User: form.Get("user"), Text: form.Get("text"), Blocks: json.RawMessage(form.Get("blocks"))}
}

func (f *Server) postMessage(w http.ResponseWriter, _ *http.Request, form url.Values) {
	m := msgOf(form)
	f.mu.Lock()
	m.TS = f.ts()
	f.msgs = append(f.msgs, m)
	f.mu.Unlock()
	writeOK(w, map[string]any{"channel": m.Channel, "ts": m.TS})
}

func (f *Server) update(w http.ResponseWriter, _ *http.Request, form url.Values) {
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

func (f *Server) postEphemeral(w http.ResponseWriter, _ *http.Request, form url.Values) {
	m := msgOf(form)
	f.mu.Lock()
	m.TS = f.ts()
	f.ephemeral = append(f.ephemeral, m)
	f.mu.Unlock()
	writeOK(w, map[string]any{"message_ts": m.TS})
}

// reactionAdd adds the bot's reaction to a message, unless it shows it
// already (already_reacted). (The fake has one caller, the bot.)
func (f *Server) reactionAdd(w http.ResponseWriter, _ *http.Request, form url.Values) {
	name, on := form.Get("name"), form.Get("channel")+"/"+form.Get("timestamp")
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.shown[on], name) {
		writeErr(w, "already_reacted")
		return
	}
	f.shown[on] = append(f.shown[on], name)
	f.reactions = append(f.reactions, Reaction{Name: name, Channel: form.Get("channel"), TS: form.Get("timestamp")})
	writeOK(w, nil)
}

// reactionRemove takes the bot's reaction off a message (no_reaction when
// it does not show it).
func (f *Server) reactionRemove(w http.ResponseWriter, _ *http.Request, form url.Values) {
	name, on := form.Get("name"), form.Get("channel")+"/"+form.Get("timestamp")
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.shown[on], name)
	if i < 0 {
		writeErr(w, "no_reaction")
		return
	}
	f.shown[on] = slices.Delete(f.shown[on], i, i+1)
	writeOK(w, nil)
}

func (f *Server) usergroupsList(w http.ResponseWriter, _ *http.Request, _ url.Values) {
	f.mu.Lock()
	groups := append([]slack.UserGroup(nil), f.groups...)
	f.mu.Unlock()
	writeOK(w, map[string]any{"usergroups": groups})
}

func (f *Server) getUploadURL(w http.ResponseWriter, _ *http.Request, form url.Values) {
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

func (f *Server) upload(w http.ResponseWriter, r *http.Request, _ url.Values) {
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

func (f *Server) completeUpload(w http.ResponseWriter, _ *http.Request, form url.Values) {
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
		f.files = append(f.files, File{ID: file.ID, Title: file.Title, Channel: form.Get("channel_id"),
			Thread: form.Get("thread_ts"), Comment: form.Get("initial_comment"), Data: data})
		out = append(out, map[string]string{"id": file.ID, "title": file.Title})
	}
	writeOK(w, map[string]any{"files": out})
}

func (f *Server) response(w http.ResponseWriter, r *http.Request, _ url.Values) {
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
	f.responses = append(f.responses, Response{Path: r.URL.Path, Msg: m, Raw: string(b)})
	f.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

// State is a copy of what the server recorded.
type State struct {
	Msgs      []Msg            // chat.postMessage, in order
	Edits     map[string][]Msg // chat.update, by ts
	Ephemeral []Msg
	Reactions []Reaction
	// Shown are the reactions each message shows now, by "channel/ts",
	// oldest first (after removals).
	Shown     map[string][]string
	Files     []File     // completed uploads
	Responses []Response // posts to response_urls
	Calls     []Call     // every call, in order
}

func (f *Server) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := State{Msgs: append([]Msg(nil), f.msgs...), Edits: map[string][]Msg{},
		Ephemeral: append([]Msg(nil), f.ephemeral...), Reactions: append([]Reaction(nil), f.reactions...),
		Files: append([]File(nil), f.files...), Responses: append([]Response(nil), f.responses...),
		Calls: append([]Call(nil), f.calls...)}
	for k, v := range f.edits {
		s.Edits[k] = append([]Msg(nil), v...)
	}
	s.Shown = map[string][]string{}
	for k, v := range f.shown {
		s.Shown[k] = append([]string(nil), v...)
	}
	return s
}

// Roots are the channel messages that are not in a thread.
func (s State) Roots(channel string) []Msg {
	var out []Msg
	for _, m := range s.Msgs {
		if m.Channel == channel && m.Thread == "" {
			out = append(out, m)
		}
	}
	return out
}

// Thread is the messages posted under ts.
func (s State) Thread(ts string) []Msg {
	var out []Msg
	for _, m := range s.Msgs {
		if m.Thread == ts {
			out = append(out, m)
		}
	}
	return out
}

// BlocksText joins the text of a message's blocks: sections (text and
// fields), headers and context, one a line.
func BlocksText(t testing.TB, raw json.RawMessage) string {
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
			for _, f := range b.Fields {
				parts = append(parts, f.Text)
			}
		case *slack.HeaderBlock:
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

// Count is the number of calls of method.
func (s State) Count(method string) int {
	n := 0
	for _, c := range s.Calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// BlocksOf is the text a slash command's or response_url's message shows.
func BlocksOf(t testing.TB, m slack.WebhookMessage) string {
	t.Helper()
	if m.Blocks == nil {
		return m.Text
	}
	raw, err := json.Marshal(m.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	return BlocksText(t, raw)
}

// socket is the Socket Mode WebSocket (apps.connections.open hands out its
// URL). It replaces slacktest's RTM socket, which spins on a read error after
// the client goes and needs its unbuffered feeds drained: this one says
// hello, sends the queued envelopes, pings as Slack does, and records every
// ack until the client goes.
func (f *Server) socket(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	c, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	f.mu.Lock()
	f.conns++
	conn := f.conns
	f.mu.Unlock()
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
		var a Ack
		if json.Unmarshal(b, &a) == nil && a.EnvelopeID != "" {
			a.Conn = conn
			f.mu.Lock()
			f.acks = append(f.acks, a)
			f.mu.Unlock()
		}
	}
}

// Send queues a Socket Mode envelope for the connected client.
func (f *Server) Send(envelopeID, typ string, payload any) {
	b, err := json.Marshal(map[string]any{"envelope_id": envelopeID, "type": typ, "payload": payload,
		"accepts_response_payload": typ == "slash_commands"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.envelopes <- string(b)
}

// Ack returns the acks of envelopeID so far.
func (f *Server) Ack(envelopeID string) []Ack {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Ack
	for _, a := range f.acks {
		if a.EnvelopeID == envelopeID {
			out = append(out, a)
		}
	}
	return out
}
