package slack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/chattest"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/labtest"
	"github.com/opsbot/opsbot/internal/slackfake"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

const (
	testSecret  = "8f742231b10e8888abcd99yyyzzz85a5"
	opsChannel  = "C0OPS"
	otherChan   = "C0RANDOM"
	operatorID  = "U0OLGA"
	viewerID    = "U0VIC"
	adminID     = "U0ADA"
	strangerID  = "U0NOBODY"
	groupID     = "S0ONCALL"
	groupMember = "U0GRACE"
	secondID    = "U0PETRA" // a second operator, who approves
	scopedID    = "U0SCOPE" // operator on coder only, viewer everywhere
)

var testUsers = map[string]config.Grant{
	"slack:" + operatorID:    config.RoleEverywhere("operator"),
	"slack:" + viewerID:      config.RoleEverywhere("viewer"),
	"slack:" + adminID:       config.RoleEverywhere("admin"),
	"slack-group:" + groupID: config.RoleEverywhere("operator"),
	"slack:" + secondID:      config.RoleEverywhere("operator"),
	"slack:" + scopedID:      {Roles: chattest.ScopedRoles},
}

// rig is an opsbot with the Slack adapter against fakeSlack: the real App
// (store, dispatcher, job engine) and, with lab, the lab's hosts over SSH.
type rig struct {
	t      testing.TB
	slack  *slackfake.Server
	ad     *Adapter
	app    *bot.App
	events *httptest.Server // opsbot's listener with the adapter's routes
	in     *countingInbound
	now    atomic.Pointer[time.Time]
}

type rigOptions struct {
	mode    string // config.SlackModeHTTP (default) or socket
	lab     bool
	backend jobs.Backend
	allowDM bool
	// twoPerson are auth.two_person.commands.
	twoPerson []string
}

// countingInbound passes every request to the real dispatcher and counts
// them, so a test can say a refused delivery reached nothing: handled and
// acted count what the door took on, dups what it answered Duplicate
// (seen before: nothing ran).
type countingInbound struct {
	bot.Inbound
	handled, acted, dups atomic.Int64
}

func (c *countingInbound) Handle(ctx context.Context, r bot.Request) bot.Reply {
	rep := c.Inbound.Handle(ctx, r)
	c.count(rep, &c.handled)
	return rep
}

func (c *countingInbound) Act(ctx context.Context, a bot.ActionRequest) bot.Reply {
	rep := c.Inbound.Act(ctx, a)
	c.count(rep, &c.acted)
	return rep
}

func (c *countingInbound) count(r bot.Reply, n *atomic.Int64) {
	if r.Outcome == bot.Duplicate {
		c.dups.Add(1)
		return
	}
	n.Add(1)
}

const minimalConfig = `
store: {path: opsbot.db}
ssh: {key_file: id_ed25519, known_hosts: known_hosts}
hosts:
  gpu1: {addr: "127.0.0.1:2222", user: root}
  gpu2: {addr: "127.0.0.1:2223", user: root}
default_service: qwen
services:
  qwen: {host: gpu1, unit: sglang-qwen.service, url: "http://127.0.0.1:30000"}
  coder: {host: gpu2, unit: sglang-coder.service, url: "http://127.0.0.1:30001"}
`

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	if o.mode == "" {
		o.mode = config.SlackModeHTTP
	}
	r := &rig{t: t, slack: slackfake.New(t)}
	r.slack.SetGroups([]slack.UserGroup{{ID: groupID, Handle: "oncall", Users: []string{groupMember}}})
	dir := t.TempDir()
	var cfg *config.Config
	var err error
	var l *lab.Lab
	if o.lab {
		l = labtest.Start(t, lab.Options{})
		path, err := l.WriteConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err = config.Load(path); err != nil {
			t.Fatal(err)
		}
	} else if cfg, err = config.Parse([]byte(minimalConfig), dir, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	cfg.Auth = config.Auth{DefaultRole: "none", Users: testUsers, TwoPerson: config.TwoPerson{Commands: o.twoPerson}}
	sc := &config.Slack{Enabled: true, Mode: o.mode, BotToken: "xoxb-test-token", APIURL: r.slack.URL(),
		Channel: opsChannel, Channels: []string{opsChannel}, AllowDMs: o.allowDM}
	if o.mode == config.SlackModeHTTP {
		sc.SigningSecret = testSecret
	} else {
		sc.AppToken = "xapp-test-token"
	}
	log := testkit.Logger(t)
	cfg.Slack = sc // the door's admission: the channels and DMs
	r.ad, err = New(*sc, Options{Logger: log, Now: func() time.Time {
		if p := r.now.Load(); p != nil {
			return *p
		}
		return time.Now()
	}})
	if err != nil {
		t.Fatal(err)
	}
	opts := bot.AppOptions{Backend: o.backend, Chats: map[string]bot.Chat{Platform: r.ad}, Logger: log}
	if o.lab {
		opts.NewBackend = func(deps bot.BackendDeps) (jobs.Backend, error) {
			rb, err := labtest.Runbook(t, l, deps.Nodes)
			if err != nil {
				return nil, err
			}
			return jobs.RunbookBackend(rb), nil
		}
	}
	ctx := context.Background()
	r.app, err = bot.NewApp(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.in = &countingInbound{Inbound: r.app.Dispatcher}
	mux := http.NewServeMux()
	for pattern, h := range r.ad.Routes() {
		mux.Handle(pattern, h)
	}
	r.events = httptest.NewServer(mux)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.ad.Run(runCtx, r.in) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("adapter Run: %v", err)
		}
		r.events.Close()
		r.app.Close()
	})
	testkit.WaitFor(r.t, 10*time.Second, "the adapter to be ready", func() bool { return r.ad.Ready() == nil })
	return r
}

// delivery is one signed HTTP request to POST /slack/events.
type delivery struct {
	body        string
	contentType string
	ts          string // X-Slack-Request-Timestamp; "" = now
	sig         string // X-Slack-Signature; "" = signed with testSecret
	retry       string // X-Slack-Retry-Num, set on Slack's own retries
}

func slashForm(command, text, user, channel, responsePath string) url.Values {
	return url.Values{"command": {command}, "text": {text}, "user_id": {user}, "user_name": {strings.ToLower(user)},
		"channel_id": {channel}, "team_id": {"T0TEAM"}, "response_url": {responsePath}}
}

func (r *rig) responseURL(name string) string { return r.slack.URL() + "response/" + name }

func (r *rig) sign(d delivery) delivery {
	if d.ts == "" {
		d.ts = strconv.FormatInt(time.Now().Unix(), 10)
	}
	if d.sig == "" {
		d.sig = Sign(testSecret, d.ts, []byte(d.body))
	}
	if d.contentType == "" {
		d.contentType = "application/x-www-form-urlencoded"
	}
	return d
}

// post sends d and returns the status and body of the answer.
func (r *rig) post(d delivery) (int, string) {
	r.t.Helper()
	return r.postT(r.t, d)
}

// postT is post failing t (a fuzz target's own).
func (r *rig) postT(t testing.TB, d delivery) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.events.URL+EventsPath, strings.NewReader(d.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", d.contentType)
	req.Header.Set("X-Slack-Request-Timestamp", d.ts)
	req.Header.Set("X-Slack-Signature", d.sig)
	if d.retry != "" {
		req.Header.Set("X-Slack-Retry-Num", d.retry)
		req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	}
	resp, err := r.events.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// slash sends a signed slash command and decodes its ack.
func (r *rig) slash(command, text, user, channel string) slack.WebhookMessage {
	r.t.Helper()
	form := slashForm(command, text, user, channel, r.responseURL(user))
	code, body := r.post(r.sign(delivery{body: form.Encode()}))
	if code != http.StatusOK {
		r.t.Fatalf("%s %s: HTTP %d: %s", command, text, code, body)
	}
	var m slack.WebhookMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		r.t.Fatalf("%s %s: ack %q: %v", command, text, body, err)
	}
	return m
}

// click sends a signed block_actions payload: user clicks the button with
// action id on a message in channel.
func (r *rig) click(actionID, user, channel, responseName string) {
	r.t.Helper()
	payload := map[string]any{
		"type":         "block_actions",
		"trigger_id":   strconv.FormatInt(time.Now().UnixNano(), 10), // each click is a delivery of its own
		"user":         map[string]string{"id": user, "name": strings.ToLower(user)},
		"channel":      map[string]string{"id": channel},
		"response_url": r.responseURL(responseName),
		"actions":      []map[string]string{{"action_id": actionID, "block_id": "opsbot_actions", "type": "button", "value": actionID}},
	}
	b, err := json.Marshal(payload)
	if err != nil {
		r.t.Fatal(err)
	}
	code, body := r.post(r.sign(delivery{body: url.Values{"payload": {string(b)}}.Encode()}))
	if code != http.StatusOK {
		r.t.Fatalf("click %s: HTTP %d: %s", actionID, code, body)
	}
}

// jobs lists the store's jobs, newest first.
func (r *rig) jobs() []store.Job {
	r.t.Helper()
	js, err := r.app.Store.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		r.t.Fatal(err)
	}
	return js
}

// waitJob waits until job id has ended.
func (r *rig) waitJob(id int64, within time.Duration) store.Job {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	j, err := r.app.Engine.Wait(ctx, id)
	if err != nil {
		r.t.Fatalf("wait for job #%d: %v", id, err)
	}
	return j
}

// quickBackend is a pipeline of two steps and a result, for tests about the
// adapter rather than the ops layer; block, when set, holds the job until
// it is closed or the job is cancelled.
func quickBackend(block chan struct{}) jobs.Backend {
	return jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		rep.Report(ops.Event{Step: "work", Status: ops.StepStarted, Message: "doing " + commands.Text(cmd)})
		if block != nil {
			select {
			case <-block:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		rep.Report(ops.Event{Step: "work", Status: ops.StepDone, Message: "done"})
		return &ops.Result{Summary: "all good"}, nil
	})
}
