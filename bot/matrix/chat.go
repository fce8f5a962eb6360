package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"regexp"
	"strings"
	"unicode/utf8"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/attachment"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/opsbot/opsbot/bot"
)

// Post sends a root message: an m.notice with HTML, answering m.ReplyTo when
// set. A status message's text is remembered so that an edit to the same
// text is not sent.
func (a *Adapter) Post(ctx context.Context, room string, m bot.Message) (bot.Ref, error) {
	cli, err := a.conn(ctx)
	if err != nil {
		return bot.Ref{}, err
	}
	if err := a.beforeSend(ctx, cli, id.RoomID(room)); err != nil {
		return bot.Ref{}, err
	}
	c := notice(m.Text)
	if m.ReplyTo != "" {
		c.RelatesTo = (&event.RelatesTo{}).SetReplyTo(id.EventID(m.ReplyTo))
	}
	resp, err := cli.SendMessageEvent(ctx, id.RoomID(room), event.EventMessage, c)
	if err != nil {
		return bot.Ref{}, fmt.Errorf("matrix: post in %s: %w", room, err)
	}
	if m.Kind == bot.KindStatus {
		a.mu.Lock()
		a.shown[resp.EventID] = m.Text
		a.mu.Unlock()
	}
	return bot.Ref{Room: room, ID: string(resp.EventID)}, nil
}

// Edit replaces the text of ref with an m.replace event; an edit that would
// not change the text is not sent. The final edit of a status message also
// reacts to it with the outcome's icon (✅, ❌, 🚫, ...) and, when it
// replaces an earlier outcome (Message.Replaces: a late record), redacts the
// bot's reaction of that one, so the message shows one outcome.
func (a *Adapter) Edit(ctx context.Context, ref bot.Ref, m bot.Message) error {
	cli, err := a.conn(ctx)
	if err != nil {
		return err
	}
	if err := a.beforeSend(ctx, cli, id.RoomID(ref.Room)); err != nil {
		return err
	}
	root := id.EventID(ref.ID)
	a.mu.Lock()
	same := a.shown[root] == m.Text
	if m.Final {
		delete(a.shown, root)
	} else {
		a.shown[root] = m.Text
	}
	react := m.Final
	a.mu.Unlock()
	if !same {
		c := notice(m.Text)
		c.SetEdit(root)
		if _, err := cli.SendMessageEvent(ctx, id.RoomID(ref.Room), event.EventMessage, c); err != nil {
			return fmt.Errorf("matrix: edit %s in %s: %w", ref.ID, ref.Room, err)
		}
	}
	if !react || !m.Status.Final() {
		return nil
	}
	icon := m.Status.Icon()
	if icon != "" {
		if _, err := cli.SendReaction(ctx, id.RoomID(ref.Room), root, icon); err != nil {
			return fmt.Errorf("matrix: react to %s in %s: %w", ref.ID, ref.Room, err)
		}
	}
	if old := m.Replaces.Icon(); m.Replaces.Final() && old != icon {
		return unreact(ctx, cli, id.RoomID(ref.Room), root, old)
	}
	return nil
}

// unreact redacts the bot's reactions key on root (one outcome per
// message: the earlier outcome's goes), wherever they were sent from (an
// opsbot process that took the job over): the homeserver's relations of
// root name them.
func unreact(ctx context.Context, cli *mautrix.Client, room id.RoomID, root id.EventID, key string) error {
	req := &mautrix.ReqGetRelations{RelationType: event.RelAnnotation, EventType: event.EventReaction, Limit: 100}
	for page := 0; page < 10; page++ {
		resp, err := cli.GetRelations(ctx, room, root, req)
		if err != nil {
			return fmt.Errorf("matrix: read the reactions to %s in %s: %w", root, room, err)
		}
		for _, evt := range resp.Chunk {
			if evt.Sender != cli.UserID || reactionKey(evt) != key {
				continue
			}
			if _, err := cli.RedactEvent(ctx, room, evt.ID); err != nil {
				return fmt.Errorf("matrix: take back the reaction %s to %s in %s: %w", key, root, room, err)
			}
		}
		if resp.NextBatch == "" {
			return nil
		}
		req.From = resp.NextBatch
	}
	return nil
}

// reactionKey is the key of a reaction event, from its raw content.
func reactionKey(evt *event.Event) string {
	var c struct {
		RelatesTo struct {
			Key string `json:"key"`
		} `json:"m.relates_to"`
	}
	_ = json.Unmarshal(evt.Content.VeryRaw, &c)
	return c.RelatesTo.Key
}

// Reply posts m in the thread of ref (ref may be the root or a reply in
// its thread): text as an m.notice, an image as an m.image after it, text
// longer than 16 KiB as its first lines and an m.file with all of it.
func (a *Adapter) Reply(ctx context.Context, ref bot.Ref, m bot.Message) (bot.Ref, error) {
	cli, err := a.conn(ctx)
	if err != nil {
		return bot.Ref{}, err
	}
	room := id.RoomID(ref.Room)
	if err := a.beforeSend(ctx, cli, room); err != nil {
		return bot.Ref{}, err
	}
	a.mu.Lock()
	root := id.EventID(ref.ID)
	if r, ok := a.roots[root]; ok {
		root = r
	}
	a.mu.Unlock()
	text := m.Text
	var file []byte
	if len(text) > maxInline {
		file = []byte(text)
		text = head(text, 20) + "\n… (the whole output is attached)"
	}
	var last bot.Ref
	send := func(c *event.MessageEventContent) error {
		a.mu.Lock()
		prev := a.last[root]
		if prev == "" {
			prev = root
		}
		a.mu.Unlock()
		c.RelatesTo = (&event.RelatesTo{}).SetThread(root, prev)
		resp, err := cli.SendMessageEvent(ctx, room, event.EventMessage, c)
		if err != nil {
			return fmt.Errorf("matrix: reply in the thread of %s in %s: %w", root, room, err)
		}
		a.mu.Lock()
		if len(a.roots) > maxThreads {
			// Forget old threads: a reply to one then falls back to
			// answering its root, which is still in the thread.
			clear(a.roots)
			clear(a.last)
		}
		a.last[root] = resp.EventID
		a.roots[resp.EventID] = root
		a.mu.Unlock()
		last = bot.Ref{Room: ref.Room, ID: string(resp.EventID)}
		return nil
	}
	if strings.TrimSpace(text) != "" {
		if err := send(notice(text)); err != nil {
			return bot.Ref{}, err
		}
	}
	if file != nil {
		c := &event.MessageEventContent{MsgType: event.MsgFile, Body: "output.txt", FileName: "output.txt",
			Info: &event.FileInfo{MimeType: "text/plain", Size: len(file)}}
		if err := a.attach(ctx, cli, room, c, file, "text/plain; charset=utf-8"); err != nil {
			return bot.Ref{}, fmt.Errorf("matrix: upload output for %s: %w", root, err)
		}
		if err := send(c); err != nil {
			return bot.Ref{}, err
		}
	}
	if m.Image != nil {
		c := &event.MessageEventContent{MsgType: event.MsgImage, Body: m.Image.Name, FileName: m.Image.Name,
			Info: &event.FileInfo{MimeType: "image/png", Size: len(m.Image.PNG)}}
		if err := a.attach(ctx, cli, room, c, m.Image.PNG, "image/png"); err != nil {
			return bot.Ref{}, fmt.Errorf("matrix: upload %s for %s: %w", m.Image.Name, root, err)
		}
		if err := send(c); err != nil {
			return bot.Ref{}, err
		}
	}
	return last, nil
}

// attach uploads data for c (an m.file or m.image): as it is, or, in a room
// the device encrypts, encrypted with a new key that travels in c (whose
// event is encrypted too), as the spec's encrypted attachments are.
func (a *Adapter) attach(ctx context.Context, cli *mautrix.Client, room id.RoomID, c *event.MessageEventContent, data []byte, mime string) error {
	if e, ok := cli.Crypto.(e2ee); ok && e.encrypted(ctx, room) {
		f := attachment.NewEncryptedFile()
		sealed := bytes.Clone(data)
		f.EncryptInPlace(sealed)
		up, err := cli.UploadBytesWithName(ctx, sealed, "application/octet-stream", c.FileName)
		if err != nil {
			return err
		}
		c.File = &event.EncryptedFileInfo{EncryptedFile: *f, URL: up.ContentURI.CUString()}
		return nil
	}
	up, err := cli.UploadBytesWithName(ctx, data, mime, c.FileName)
	if err != nil {
		return err
	}
	c.URL = up.ContentURI.CUString()
	return nil
}

// maxThreads bounds the thread replies remembered.
const maxThreads = 10000

// notice is an m.notice with the text as its plain body and as HTML.
func notice(text string) *event.MessageEventContent {
	return &event.MessageEventContent{MsgType: event.MsgNotice, Body: text,
		Format: event.FormatHTML, FormattedBody: toHTML(text)}
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	boldSpan = regexp.MustCompile(`\*([^*\n]+)\*`)
)

// toHTML renders the bot's light markup (`code`, *bold*, line breaks, and
// blocks between two ``` lines, which report.Pre makes for tables and
// logs) as HTML: a block is one <pre><code>, its lines as they are (their
// spaces kept); everything else is escaped, so text from users and hosts
// stays text.
func toHTML(text string) string {
	var b strings.Builder
	inPre, afterPre := false, false
	for i, line := range strings.Split(text, "\n") {
		switch {
		case line == "```" && !inPre:
			inPre = true
			b.WriteString("<pre><code>")
			continue
		case line == "```":
			inPre, afterPre = false, true
			b.WriteString("</code></pre>")
			continue
		case inPre:
			b.WriteString(html.EscapeString(line) + "\n")
			continue
		}
		if i > 0 && !afterPre {
			b.WriteString("<br/>")
		}
		afterPre = false
		// Split on code spans first: nothing inside code is bold.
		rest := line
		for {
			loc := codeSpan.FindStringSubmatchIndex(rest)
			if loc == nil {
				b.WriteString(bold(html.EscapeString(rest)))
				break
			}
			b.WriteString(bold(html.EscapeString(rest[:loc[0]])))
			b.WriteString("<code>" + html.EscapeString(rest[loc[2]:loc[3]]) + "</code>")
			rest = rest[loc[1]:]
		}
	}
	if inPre { // cut short (a long message's head): close it
		b.WriteString("</code></pre>")
	}
	return b.String()
}

func bold(escaped string) string { return boldSpan.ReplaceAllString(escaped, "<strong>$1</strong>") }

func head(text string, lines int) string {
	ls := strings.SplitN(text, "\n", lines+1)
	if len(ls) > lines {
		ls = ls[:lines]
	}
	out := strings.Join(ls, "\n")
	if len(out) > maxInline {
		cut := maxInline
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut]
	}
	return out
}
