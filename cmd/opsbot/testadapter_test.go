package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
)

// testAdapter is an in-memory chat adapter for tests of `opsbot serve`: it
// records what the bot posts and takes requests on opsbot's own HTTP
// listener (it is a bot.HTTPAdapter), POST /test/command with
// {"user": ID, "text": CMD}, answering the Reply as JSON; GET /test/posts
// lists what was posted (edits included) and GET /test/edits the edits.
// Message ids are the host name and a counter, as a shared chat's would
// be unique. No chat platform runs here, so this stands in for one; its
// platform is "console", whose users the config's auth names.
type testAdapter struct {
	mu    sync.Mutex
	in    bot.Inbound
	posts []string
	edits []testEdit
	n     int
}

// testEdit is one Edit the bot made: which message, to what.
type testEdit struct {
	Room string `json:"room"`
	ID   string `json:"id"`
	Text string `json:"text"`
}

var _ bot.HTTPAdapter = (*testAdapter)(nil)

// hostTestAdapter makes serve host a testAdapter: always ("extra"), or as
// the adapter of the slack section ("slack", for the secrets test).
func hostTestAdapter(how string) {
	f := func(cfg *config.Config, log *slog.Logger) (bot.Adapter, error) {
		// Log the whole section the adapter was built from, secrets
		// included: the log must show them redacted.
		log.Info("test adapter built", "slack", cfg.Slack, "matrix", cfg.Matrix)
		return &testAdapter{}, nil
	}
	if how == "slack" {
		adapterFactories["slack"] = f
		adapters["slack"] = true
		return
	}
	extraAdapters = append(extraAdapters, f)
}

func (a *testAdapter) Platform() string { return "console" }

func (a *testAdapter) Run(ctx context.Context, in bot.Inbound) error {
	a.mu.Lock()
	a.in = in
	a.mu.Unlock()
	<-ctx.Done()
	return nil
}

func (a *testAdapter) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.in == nil {
		return errors.New("not running yet")
	}
	return nil
}

func (a *testAdapter) record(room string, m bot.Message) bot.Ref {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	a.posts = append(a.posts, m.Text)
	host, _ := os.Hostname()
	return bot.Ref{Room: room, ID: fmt.Sprintf("%s-%d", host, a.n)}
}

func (a *testAdapter) Post(_ context.Context, room string, m bot.Message) (bot.Ref, error) {
	return a.record(room, m), nil
}

func (a *testAdapter) Edit(_ context.Context, ref bot.Ref, m bot.Message) error {
	a.record(ref.Room, m)
	a.mu.Lock()
	a.edits = append(a.edits, testEdit{Room: ref.Room, ID: ref.ID, Text: m.Text})
	a.mu.Unlock()
	return nil
}

func (a *testAdapter) Reply(_ context.Context, ref bot.Ref, m bot.Message) (bot.Ref, error) {
	return a.record(ref.Room, m), nil
}

// testReply is the JSON answer of POST /test/command.
type testReply struct {
	Outcome string `json:"outcome"`
	JobID   int64  `json:"job_id"`
	Text    string `json:"text"`
}

func (a *testAdapter) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST /test/command": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct{ User, Text string }
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			a.mu.Lock()
			in := a.in
			a.mu.Unlock()
			if in == nil {
				http.Error(w, "not running", http.StatusServiceUnavailable)
				return
			}
			rep := in.Handle(r.Context(), bot.Request{Platform: "console", User: req.User, Room: "test", Text: req.Text, Confirmed: true})
			json.NewEncoder(w).Encode(testReply{Outcome: string(rep.Outcome), JobID: rep.JobID, Text: rep.Text})
		}),
		"GET /test/posts": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			a.mu.Lock()
			defer a.mu.Unlock()
			json.NewEncoder(w).Encode(a.posts)
		}),
		"GET /test/edits": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			a.mu.Lock()
			defer a.mu.Unlock()
			json.NewEncoder(w).Encode(a.edits)
		}),
	}
}
