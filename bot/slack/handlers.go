package slack

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/opsbot/opsbot/bot"
)

// Commands are the slash commands the app defines (deploy/slack-manifest.yaml),
// as the command language has them (bot.SlashCommands). The text after
// one is the console's language: `/mtp steps 10` is `mtp steps 10`;
// `/opsbot TEXT` is TEXT (`/opsbot ack 3`, `/opsbot job 42`).
var Commands = bot.SlashCommands()

// answerTimeout bounds an answer sent after the ack (response_url, ephemeral).
const answerTimeout = 15 * time.Second

// commandText turns a slash command into the bot's command text.
func commandText(command, text string) (string, bool) {
	known := false
	for _, c := range Commands {
		known = known || c == command
	}
	if !known {
		return "", false
	}
	text = strings.TrimSpace(text)
	if command == bot.SlashCatchAll {
		if text == "" {
			return "help", true
		}
		return text, true
	}
	return strings.TrimSpace(strings.TrimPrefix(command, "/") + " " + text), true
}

// isDM reports whether a channel id is a direct message with the bot.
func isDM(channel string) bool { return strings.HasPrefix(channel, "D") }

// slash answers a slash command: the returned message is the ack, ephemeral
// unless the bot's reply is for the room; nil for a delivery the door saw
// before (nothing ran). delivery is the delivery's key for the door.
func (a *Adapter) slash(ctx context.Context, in bot.Inbound, sc slack.SlashCommand, delivery string) *slack.WebhookMessage {
	text, ok := commandText(sc.Command, sc.Text)
	if !ok {
		return a.ephemeral("opsbot does not know " + sc.Command + ": try `/opsbot help`.")
	}
	r := in.Handle(ctx, bot.Request{Platform: Platform, User: sc.UserID, UserName: sc.UserName, Room: sc.ChannelID, Text: text,
		Delivery: delivery, DM: isDM(sc.ChannelID)})
	if r.Outcome == bot.Duplicate {
		return nil
	}
	return a.replyMessage(r, false)
}

func (a *Adapter) ephemeral(text string) *slack.WebhookMessage {
	return a.replyMessage(bot.Reply{Text: text, Audience: bot.ToUser}, false)
}

// replyMessage lays a bot.Reply out as a slash command's or response_url's
// message: ephemeral for ToUser, in the channel for ToRoom.
func (a *Adapter) replyMessage(r bot.Reply, replace bool) *slack.WebhookMessage {
	m := &slack.WebhookMessage{Text: truncate(firstLine(r.Text), maxFallback), ResponseType: slack.ResponseTypeEphemeral,
		ReplaceOriginal: replace}
	if r.Audience == bot.ToRoom {
		m.ResponseType = slack.ResponseTypeInChannel
	}
	if blocks := renderReply(r, a.now()); len(blocks) > 0 {
		m.Blocks = &slack.Blocks{BlockSet: blocks}
	}
	return m
}

// click performs the actions of a button click for the user who clicked, and
// answers through the click's response_url after the ack: the message with
// the buttons is replaced by the outcome, unless the click was refused (then
// the buttons stay for whoever may use them, and the refusal goes to the
// clicker only) or the outcome is a request for a second person's approval
// (a new message in the channel, for the others to see). It reports whether the door saw the delivery before
// (nothing ran). Each click is claimed by its trigger_id (the same in a
// replayed delivery), else by delivery.
func (a *Adapter) click(ctx context.Context, in bot.Inbound, cb slack.InteractionCallback, delivery string) (dup bool) {
	if cb.Type != slack.InteractionTypeBlockActions {
		return false
	}
	if cb.TriggerID != "" {
		delivery = "trigger:" + cb.TriggerID
	}
	for _, act := range cb.ActionCallback.BlockActions {
		r := in.Act(ctx, bot.ActionRequest{ID: act.ActionID, Platform: Platform, User: cb.User.ID,
			UserName: cb.User.Name, Room: cb.Channel.ID, Delivery: delivery + ":" + act.ActionID, DM: isDM(cb.Channel.ID)})
		if r.Outcome == bot.Duplicate {
			dup = true
			continue
		}
		refused := r.Outcome == bot.Refused || r.Outcome == bot.Invalid
		m := a.replyMessage(r, !refused && r.Outcome != bot.NeedsApproval)
		if refused {
			m.ResponseType = slack.ResponseTypeEphemeral
		}
		a.answer(cb.ResponseURL, cb.Channel.ID, cb.User.ID, m)
	}
	return dup
}

// answer sends m after the ack, in a goroutine Run waits for: to the
// delivery's response_url when it has one (and it is Slack's), else as an
// ephemeral message (chat.postEphemeral) or a channel message.
func (a *Adapter) answer(responseURL, channel, user string, m *slack.WebhookMessage) {
	a.tasks.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
		defer cancel()
		var err error
		switch {
		case responseURL != "" && a.trustedURL(responseURL):
			err = a.call(ctx, "answer through response_url", func(ctx context.Context) error {
				return slack.PostWebhookCustomHTTPContext(ctx, responseURL, a.httpc, m)
			})
		case responseURL != "":
			a.log.Warn("not answering to a response_url outside Slack", "url_host", hostOf(responseURL))
			return
		default:
			opts := []slack.MsgOption{slack.MsgOptionText(m.Text, false)}
			if m.Blocks != nil {
				opts = append(opts, slack.MsgOptionBlocks(m.Blocks.BlockSet...))
			}
			if m.ThreadTimestamp != "" {
				opts = append(opts, slack.MsgOptionTS(m.ThreadTimestamp))
			}
			if m.ResponseType == slack.ResponseTypeInChannel {
				err = a.call(ctx, "chat.postMessage to "+channel, func(ctx context.Context) error {
					_, _, err := a.api.PostMessageContext(ctx, channel, opts...)
					return err
				})
			} else {
				err = a.call(ctx, "chat.postEphemeral to "+user+" in "+channel, func(ctx context.Context) error {
					_, err := a.api.PostEphemeralContext(ctx, channel, user, opts...)
					return err
				})
			}
		}
		if err != nil {
			a.log.Warn("answer a Slack delivery", "channel", channel, "user", user, "err", err)
		}
	})
}

// trustedURL reports whether a response_url may be posted to: Slack's hooks
// host, or the host of the configured API URL (a Slack-compatible server).
func (a *Adapter) trustedURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return false
	}
	if u.Scheme == "https" && u.Host == "hooks.slack.com" {
		return true
	}
	return a.cfg.APIURL != "" && hostOf(a.cfg.APIURL) == u.Host
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

var mentionRE = regexp.MustCompile(`<@[A-Z0-9]+(\|[^>]*)?>`)

// event handles an Events API event (already acked): a mention of the bot in
// an allowed channel, or a direct message when DMs are allowed, runs its text
// as a command; the answer goes to the user (ephemeral) or the channel's
// thread of the mention. Each event is claimed by its event_id (the same
// in Slack's retries and in a replayed delivery); it reports whether the
// door saw it before (nothing ran).
func (a *Adapter) event(ctx context.Context, in bot.Inbound, ev slackevents.EventsAPIEvent) (dup bool) {
	cb, ok := ev.Data.(*slackevents.EventsAPICallbackEvent)
	if !ok {
		return false
	}
	var user, channel, text, ts string
	var dm bool
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		if e.BotID != "" {
			return false
		}
		user, channel, text, ts = e.User, e.Channel, e.Text, e.TimeStamp
	case *slackevents.MessageEvent:
		if e.ChannelType != "im" || e.BotID != "" || e.SubType != "" {
			return false
		}
		user, channel, text, ts, dm = e.User, e.Channel, e.Text, e.TimeStamp, true
	default:
		return false
	}
	text = strings.TrimSpace(mentionRE.ReplaceAllString(text, ""))
	if user == "" || text == "" {
		return false
	}
	r := in.Handle(ctx, bot.Request{Platform: Platform, User: user, Room: channel, Text: text, Delivery: "event:" + cb.EventID,
		DM: dm || isDM(channel)})
	if r.Outcome == bot.Duplicate {
		return true
	}
	m := a.replyMessage(r, false)
	if m.ResponseType == slack.ResponseTypeInChannel {
		m.ThreadTimestamp = ts
	}
	a.answer("", channel, user, m)
	return false
}
