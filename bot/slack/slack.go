// Package slack is opsbot's Slack adapter: slash commands, button clicks and
// Events API deliveries in, status threads out. It only translates: every
// decision (parse, auth, confirm, render text) is made by package bot.
//
// Deliveries come either over HTTP (mode http: POST /slack/events on opsbot's
// listener, each request's X-Slack-Signature verified) or over Socket Mode
// (mode socket: slack-go's socketmode client, reconnecting with backoff);
// both feed the same handlers. A delivery is verified (its signature: the
// adapter's one decision), passed to the door (bot.Inbound: the channel
// allowlist, the delivery's durable claim, roles) and acknowledged within
// Slack's 3 seconds:
// a usage error or refusal goes back to the user only (ephemeral), an
// accepted job is acknowledged with its id and a Cancel button.
//
// Who may do what is bot's decision, by Slack user id ("slack:U024BE7LH")
// and user group ("slack-group:S0123": the adapter is the bot.Membership
// that lists the groups' members); the door takes commands only in the
// channels slack.channels lists, and in DMs only with slack.allow_dms.
//
// As a bot.Chat it posts one root message per job, edits it in place with
// chat.update (as often as the bot's runtime sends edits: it paces them to
// EditInterval, the one pacer), threads step lines under it, uploads long output and charts as
// files into the thread (files.getUploadURLExternal, then
// files.completeUploadExternal), and reacts to the final status with the
// outcome (one: a late record's edit removes the outcome it replaces). A call Slack rate-limits (429) is sent again after Retry-After,
// one that fails on the network or with a 5xx after a short backoff; a call
// that fails anyway is logged by the bot and the job goes on: its state is
// in the store and the next update carries all of it.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
)

// Platform is the adapter's platform name and its users' auth key prefix
// ("slack:U024BE7LH"); user groups are "slack-group:S0123".
const Platform = "slack"

// EditInterval is how often the bot updates a job's thread: about Slack's
// one message a second per channel, so every step shows within 2 s.
const EditInterval = time.Second

// Options are what New needs beyond the config section.
type Options struct {
	Logger *slog.Logger
	// HTTPClient makes the Web API calls and posts to response_urls;
	// nil: a client with a 30 s timeout.
	HTTPClient *http.Client
	// GroupRefresh is how often the user groups are listed again; zero: 5 minutes.
	GroupRefresh time.Duration
	// Now is the clock signatures are checked against; nil: time.Now.
	Now func() time.Time
}

// Adapter is the Slack adapter. It is safe for concurrent use.
type Adapter struct {
	cfg     config.Slack
	api     *slack.Client
	httpc   *http.Client
	log     *slog.Logger
	now     func() time.Time
	refresh time.Duration
	// onReject counts a refused delivery (CountRejects).
	onReject func(reason string)

	in     atomic.Pointer[inboundRef] // set while Run runs
	status atomic.Pointer[string]     // why not ready; "" when ready
	groups groupCache
	calls  atomic.Int64 // Web API calls made, for figures

	tasks tasks // answers sent after their ack, held edits
}

type inboundRef struct{ in bot.Inbound }

var (
	_ bot.HTTPAdapter = (*Adapter)(nil)
	_ bot.Pacer       = (*Adapter)(nil)
	_ bot.Membership  = (*Adapter)(nil)
)

// New builds the adapter from the config's slack section (validated by
// package config). It makes no call to Slack: Run does.
func New(cfg config.Slack, o Options) (*Adapter, error) {
	if cfg.Mode == "" {
		cfg.Mode = config.SlackModeSocket
	}
	switch {
	case cfg.BotToken == "":
		return nil, errors.New("slack adapter: slack.bot_token is required")
	case cfg.Mode == config.SlackModeHTTP && cfg.SigningSecret == "":
		return nil, errors.New("slack adapter: slack.signing_secret is required in http mode")
	case cfg.Mode == config.SlackModeSocket && cfg.AppToken == "":
		return nil, errors.New("slack adapter: slack.app_token is required in socket mode")
	case cfg.Mode != config.SlackModeHTTP && cfg.Mode != config.SlackModeSocket:
		return nil, fmt.Errorf("slack adapter: slack.mode must be %s or %s", config.SlackModeHTTP, config.SlackModeSocket)
	}
	a := &Adapter{cfg: cfg, log: o.Logger, now: o.Now, httpc: o.HTTPClient, refresh: o.GroupRefresh}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.log = a.log.With("adapter", Platform)
	if a.now == nil {
		a.now = time.Now
	}
	if a.httpc == nil {
		a.httpc = &http.Client{Timeout: 30 * time.Second}
	}
	if a.refresh <= 0 {
		a.refresh = 5 * time.Minute
	}
	opts := []slack.Option{slack.OptionHTTPClient(countingClient{a.httpc, &a.calls})}
	if cfg.APIURL != "" {
		opts = append(opts, slack.OptionAPIURL(cfg.APIURL))
	}
	if cfg.AppToken != "" {
		opts = append(opts, slack.OptionAppLevelToken(cfg.AppToken.Value()))
	}
	a.api = slack.New(cfg.BotToken.Value(), opts...)
	a.setStatus("not started")
	return a, nil
}

// countingClient counts the Web API calls the adapter makes.
type countingClient struct {
	c *http.Client
	n *atomic.Int64
}

func (c countingClient) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.c.Do(r)
}

// Platform is "slack".
func (a *Adapter) Platform() string { return Platform }

// EditInterval is bot.Pacer: the bot sends a job's updates at most this often.
func (a *Adapter) EditInterval() time.Duration { return EditInterval }

// Calls returns how many Slack Web API calls the adapter has made.
func (a *Adapter) Calls() int64 { return a.calls.Load() }

// CountRejects is bot.Rejecter: count is told of each delivery refused by
// the adapter's own checks (no_signature, stale_timestamp, bad_signature,
// bad_body) instead of a log line each. Call it before the routes serve.
func (a *Adapter) CountRejects(count func(reason string)) { a.onReject = count }

// reject counts a refused delivery.
func (a *Adapter) reject(reason string) {
	if a.onReject != nil {
		a.onReject(reason)
		return
	}
	a.log.Warn("refused a delivery", "reason", reason)
}

// Ready returns nil while the adapter is connected to Slack and takes
// requests, else why not ("connecting to Slack (auth.test)"; the host names
// the platform).
func (a *Adapter) Ready() error {
	if s := *a.status.Load(); s != "" {
		return errors.New(s)
	}
	return nil
}

func (a *Adapter) setStatus(s string) { a.status.Store(&s) }

// GroupsOf is bot.Membership: the user groups user is a member of, from the
// cache Run keeps (usergroups.list, every GroupRefresh).
func (a *Adapter) GroupsOf(user string) []string { return a.groups.of(user) }

// Run checks the bot token (auth.test), then takes deliveries and passes them
// to in until ctx ends: in http mode from Routes, in socket mode from its
// Socket Mode connection, reconnecting with backoff. It returns an error
// only when Slack refuses the token; it returns nil after ctx ends, once
// every delivery in flight is answered.
func (a *Adapter) Run(ctx context.Context, in bot.Inbound) error {
	defer a.tasks.wait()
	defer a.setStatus("stopped")
	a.setStatus("connecting to Slack (auth.test)")
	if err := a.authTest(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	a.in.Store(&inboundRef{in})
	defer a.in.Store(nil)
	a.refreshGroups(ctx)
	a.tasks.Go(func() { a.groupLoop(ctx) })
	if a.cfg.Mode == config.SlackModeHTTP {
		a.setStatus("")
		<-ctx.Done()
		return nil
	}
	return a.runSocket(ctx)
}

// authTest calls auth.test until it answers, with backoff; an answer that
// refuses the token is returned as an error that names the fix.
func (a *Adapter) authTest(ctx context.Context) error {
	delay := 500 * time.Millisecond
	for {
		_, err := a.api.AuthTestContext(ctx)
		if err == nil {
			return nil
		}
		var se slack.SlackErrorResponse
		if errors.As(err, &se) {
			switch se.Err {
			case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired":
				return fmt.Errorf("slack auth.test: Slack refused slack.bot_token (%s): install the app and copy its Bot User OAuth Token (xoxb-...): %w", se.Err, err)
			}
		}
		a.setStatus("connecting to Slack: auth.test: " + err.Error())
		a.log.Warn("auth.test failed, retrying", "in", delay, "err", err)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, 30*time.Second)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// maxRetries bounds the retries of one call Slack rate-limits.
const maxRetries = 3

// call runs one Web API call, waiting out Retry-After on 429 (a few times)
// and sending it again after a network failure or a 5xx (twice, after 0.5 s
// and 1 s), and wraps a failure with what was being done.
func (a *Adapter) call(ctx context.Context, what string, f func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		var rl *slack.RateLimitedError
		if errors.As(err, &rl) && attempt < maxRetries {
			wait := max(rl.RetryAfter, 100*time.Millisecond)
			a.log.Info("rate limited by Slack, waiting", "call", what, "retry_after", wait)
			if sleep(ctx, wait) {
				continue
			}
			err = errors.Join(err, ctx.Err())
		} else if transient(err) && attempt < maxRetries-1 {
			wait := time.Duration(attempt+1) * 500 * time.Millisecond
			a.log.Info("Slack call failed, retrying", "call", what, "in", wait, "err", err)
			if sleep(ctx, wait) {
				continue
			}
			err = errors.Join(err, ctx.Err())
		}
		if hint := errorHint(err); hint != "" {
			return fmt.Errorf("slack %s: %w (%s)", what, err, hint)
		}
		return fmt.Errorf("slack %s: %w", what, err)
	}
}

// transient reports whether a failed call may succeed when sent again: the
// network failed or Slack answered 5xx. An answer of Slack's ({"ok":false})
// is not retried.
func transient(err error) bool {
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return sc.Code >= 500
	}
	var se slack.SlackErrorResponse
	return !errors.As(err, &se) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// errorHint names the fix for the Web API errors an operator can fix.
func errorHint(err error) string {
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) {
		return ""
	}
	switch se.Err {
	case "not_in_channel", "channel_not_found":
		return "invite the bot to the channel: /invite @opsbot"
	case "missing_scope":
		return "the app lacks a scope: reinstall it from deploy/slack-manifest.yaml"
	case "invalid_auth", "not_authed", "token_revoked", "account_inactive":
		return "check slack.bot_token"
	}
	return ""
}

// Post sends a new root message to channel room.
func (a *Adapter) Post(ctx context.Context, room string, m bot.Message) (bot.Ref, error) {
	blocks, text := renderMessage(m)
	opts := []slack.MsgOption{slack.MsgOptionText(text, false), slack.MsgOptionBlocks(blocks...)}
	if m.ReplyTo != "" {
		opts = append(opts, slack.MsgOptionTS(m.ReplyTo))
	}
	var ts string
	err := a.call(ctx, "chat.postMessage to "+room, func(ctx context.Context) (err error) {
		_, ts, err = a.api.PostMessageContext(ctx, room, opts...)
		return err
	})
	if err != nil {
		return bot.Ref{}, err
	}
	ref := bot.Ref{Room: room, ID: ts}
	if m.Image != nil {
		if err := a.upload(ctx, room, ts, m.Image.Name, m.Image.PNG, ""); err != nil {
			return ref, err
		}
	}
	return ref, nil
}

// update sends one chat.update; a final status edit also gets the
// outcome's reaction.
func (a *Adapter) update(ctx context.Context, ref bot.Ref, m bot.Message) error {
	blocks, text := renderMessage(m)
	err := a.call(ctx, "chat.update of "+ref.Room+"/"+ref.ID, func(ctx context.Context) error {
		_, _, _, err := a.api.UpdateMessageContext(ctx, ref.Room, ref.ID, slack.MsgOptionText(text, false), slack.MsgOptionBlocks(blocks...))
		return err
	})
	if err != nil || !m.Final || m.Kind != bot.KindStatus {
		return err
	}
	name := outcomeReaction(m.Status)
	if name != "" {
		err = a.call(ctx, "reactions.add "+name+" to "+ref.Room+"/"+ref.ID, func(ctx context.Context) error {
			err := a.api.AddReactionContext(ctx, name, slack.NewRefToMessage(ref.Room, ref.ID))
			if slackErr(err, "already_reacted") { // a retried final edit
				return nil
			}
			return err
		})
	}
	if old := outcomeReaction(m.Replaces); err == nil && old != "" && old != name {
		// One outcome per message: the earlier outcome's reaction goes
		// (the bot's own only: reactions.remove removes the caller's).
		err = a.call(ctx, "reactions.remove "+old+" from "+ref.Room+"/"+ref.ID, func(ctx context.Context) error {
			err := a.api.RemoveReactionContext(ctx, old, slack.NewRefToMessage(ref.Room, ref.ID))
			if slackErr(err, "no_reaction") { // gone already, or never shown
				return nil
			}
			return err
		})
	}
	return err
}

// slackErr reports whether err is Slack's error answer code.
func slackErr(err error, code string) bool {
	var se slack.SlackErrorResponse
	return errors.As(err, &se) && se.Err == code
}

// Reply posts m in the thread under ref. Output longer than Slack shows in a
// message goes in as a text file; an image goes in as a PNG file.
func (a *Adapter) Reply(ctx context.Context, ref bot.Ref, m bot.Message) (bot.Ref, error) {
	if len(m.Text) > longOutput {
		head := truncate(firstLine(m.Text), 200)
		name := "output.txt"
		if m.Kind == bot.KindResult {
			name = "result.txt"
		}
		if err := a.upload(ctx, ref.Room, ref.ID, name, []byte(m.Text), head+"\n(the whole text is in the file)"); err != nil {
			return bot.Ref{}, err
		}
		if m.Image != nil {
			return ref, a.upload(ctx, ref.Room, ref.ID, m.Image.Name, m.Image.PNG, "")
		}
		return ref, nil
	}
	blocks, text := renderMessage(m)
	var ts string
	err := a.call(ctx, "chat.postMessage in thread "+ref.Room+"/"+ref.ID, func(ctx context.Context) (err error) {
		_, ts, err = a.api.PostMessageContext(ctx, ref.Room, slack.MsgOptionText(text, false),
			slack.MsgOptionBlocks(blocks...), slack.MsgOptionTS(ref.ID))
		return err
	})
	if err != nil {
		return bot.Ref{}, err
	}
	if m.Image != nil {
		if err := a.upload(ctx, ref.Room, ref.ID, m.Image.Name, m.Image.PNG, ""); err != nil {
			return bot.Ref{Room: ref.Room, ID: ts}, err
		}
	}
	return bot.Ref{Room: ref.Room, ID: ts}, nil
}

// upload puts a file into channel's thread threadTS with the two-step upload
// (files.getUploadURLExternal, then files.completeUploadExternal).
func (a *Adapter) upload(ctx context.Context, channel, threadTS, name string, data []byte, comment string) error {
	return a.call(ctx, "upload "+name+" to "+channel+"/"+threadTS, func(ctx context.Context) error {
		_, err := a.api.UploadFileContext(ctx, slack.UploadFileParameters{
			Filename: name, Title: name, FileSize: len(data), Reader: strings.NewReader(string(data)),
			Channel: channel, ThreadTimestamp: threadTS, InitialComment: comment,
		})
		return err
	})
}
