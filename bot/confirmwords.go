package bot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// The words a text-only chat answers a preview with: `confirm TOKEN`, or
// `y`/`yes` for the one confirmation waiting there.

func confirmToken(text string) (string, bool) {
	text = strings.TrimLeft(text, "/!")
	f := strings.Fields(text)
	if len(f) == 2 && strings.EqualFold(f[0], "confirm") {
		return strings.ToLower(f[1]), true
	}
	return "", false
}

// YesWords answer yes to the one confirmation waiting in a room for the
// one who types them (a terminal's prompt, a text-only chat).
var YesWords = []string{"y", "yes"}

// yesWord reports whether text is one of YesWords (after a chat's / or !
// prefix), and which.
func yesWord(text string) (string, bool) {
	w := strings.ToLower(strings.TrimSpace(strings.TrimLeft(text, "/!")))
	return w, slices.Contains(YesWords, w)
}

// confirmPending is `y` or `yes`: the Confirm action of the one confirmation
// waiting in req's room for req's user (theirs, or one the bot proposed
// there), under the rules of the action. With several waiting it confirms
// none and lists them, each with the `confirm TOKEN` that confirms it.
func (d *Dispatcher) confirmPending(ctx context.Context, req Request, word string) Reply {
	all, err := d.opts.Store.PendingConfirmations(ctx, req.Platform, req.Room, d.opts.Now())
	if err != nil {
		d.log.Error("read pending confirmations", "err", err)
		return Reply{Outcome: Failed, Text: StoreDownText, Err: err}
	}
	var mine []store.Confirmation
	for _, c := range all {
		if c.Proposed || c.User == req.User {
			mine = append(mine, c)
		}
	}
	switch len(mine) {
	case 0:
		return Reply{Outcome: Invalid, Text: fmt.Sprintf("`%s` confirms a command that waits for your confirmation, and none waits here: "+
			"it was used, expired or never asked. Run the command again.", word), Err: errors.New("no confirmation waits")}
	case 1:
		return d.act(ctx, ActionRequest{ID: string(ActConfirm) + ":" + mine[0].Token, Platform: req.Platform, User: req.User,
			UserName: req.UserName, Room: req.Room, Via: req.Via, DM: req.DM})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d commands wait for your confirmation here, so `%s` confirmed none. Type the one you mean:", len(mine), word)
	for _, c := range mine {
		until := "until " + report.Clock(c.Expires)
		if c.Incident != 0 {
			until = fmt.Sprintf("while incident #%d is open", c.Incident)
		}
		fmt.Fprintf(&b, "\n`confirm %s` runs `%s` (%s)", c.Token, c.Command, until)
	}
	return Reply{Outcome: Answered, Text: b.String(), Audience: ToUser}
}
