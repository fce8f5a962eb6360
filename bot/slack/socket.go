package slack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/opsbot/opsbot/bot"
)

// maxBackoff bounds the wait between two Socket Mode connections.
const maxBackoff = time.Minute

// runSocket holds a Socket Mode connection until ctx ends: slack-go's client
// reconnects on Slack's disconnects and on dial failures with its own
// backoff; when it gives up anyway, a new client is started after a backoff
// of our own. Slack refusing the app token ends it with an error.
func (a *Adapter) runSocket(ctx context.Context) error {
	delay := time.Second
	for {
		connected, err := a.socketOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errAppToken) {
			a.setStatus(err.Error())
			return err
		}
		if connected {
			delay = time.Second
		}
		a.setStatus(fmt.Sprintf("Socket Mode connection lost (%v): reconnecting in %s", err, delay))
		a.log.Warn("socket mode connection lost, reconnecting", "in", delay, "err", err)
		if !sleep(ctx, delay) {
			return nil
		}
		delay = min(2*delay, maxBackoff)
	}
}

var errAppToken = errors.New("slack.app_token refused by Slack: create an app-level token with connections:write (Basic Information, App-Level Tokens)")

// socketOnce runs one slack-go Socket Mode client until it returns, serving
// its events, and reports whether it was ever connected.
func (a *Adapter) socketOnce(ctx context.Context) (connected bool, err error) {
	client := socketmode.New(a.api)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- client.RunContext(runCtx) }()
	in := a.in.Load().in
	badAuth := false
	for {
		select {
		case err := <-done:
			if badAuth || isAuthError(err) {
				return connected, fmt.Errorf("%w (%v)", errAppToken, err)
			}
			if err == nil {
				err = errors.New("socket mode client stopped")
			}
			return connected, err
		case evt := <-client.Events:
			switch evt.Type {
			case socketmode.EventTypeConnecting:
				a.setStatus("connecting to Slack (Socket Mode)")
			case socketmode.EventTypeConnectionError:
				a.setStatus(fmt.Sprintf("connecting to Slack (Socket Mode): %v", errorOf(evt.Data)))
			case socketmode.EventTypeInvalidAuth:
				badAuth = true
			case socketmode.EventTypeConnected:
				connected = true
				a.setStatus("")
				a.log.Info("connected to Slack (Socket Mode)")
			case socketmode.EventTypeDisconnect:
				a.setStatus("Slack asked to reconnect (Socket Mode)")
			case socketmode.EventTypeSlashCommand, socketmode.EventTypeInteractive, socketmode.EventTypeEventsAPI:
				if evt.Request == nil {
					continue
				}
				a.tasks.Go(func() { a.socketEvent(runCtx, client, in, evt) })
			}
		}
	}
}

// socketEvent serves one Socket Mode request with the handlers of mode http:
// a slash command's answer is its ack's payload; clicks and events are acked
// first and answered after. The door claims each by its envelope id (the
// same when Slack sends it again), events by their event id: a retry is
// acked again and runs nothing.
func (a *Adapter) socketEvent(ctx context.Context, client *socketmode.Client, in bot.Inbound, evt socketmode.Event) {
	delivery := "envelope:" + evt.Request.EnvelopeID
	switch data := evt.Data.(type) {
	case slack.SlashCommand:
		if m := a.slash(ctx, in, data, delivery); m != nil {
			a.ack(client, evt.Request, m)
		} else {
			a.ack(client, evt.Request, nil)
		}
	case slack.InteractionCallback:
		a.ack(client, evt.Request, nil)
		a.click(ctx, in, data, delivery)
	case slackevents.EventsAPIEvent:
		a.ack(client, evt.Request, nil)
		a.event(ctx, in, data)
	default:
		a.ack(client, evt.Request, nil)
	}
}

func (a *Adapter) ack(client *socketmode.Client, req *socketmode.Request, payload any) {
	var err error
	if payload == nil {
		err = client.Ack(*req)
	} else {
		err = client.Ack(*req, payload)
	}
	if err != nil {
		a.log.Warn("ack a Socket Mode request", "envelope", req.EnvelopeID, "err", err)
	}
}

func isAuthError(err error) bool {
	if err == nil {
		return false
	}
	switch err.Error() {
	case "invalid_auth", "account_inactive", "not_authed", "token_revoked":
		return true
	}
	var se slack.StatusCodeError
	return errors.As(err, &se) && se.Code == 404
}

func errorOf(data any) any {
	if e, ok := data.(*slack.ConnectionErrorEvent); ok {
		return e.ErrorObj
	}
	return data
}
