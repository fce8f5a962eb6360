// Package console is the terminal chat adapter: `opsbot run` (Run) and the
// prompt of `opsbot demo` (Demo). Like any chat it talks to the bot through
// its inbound door (bot.Inbound) and renders the replies and the job status
// threads as text; it reads job outcomes from the bot (never the store) and
// makes no decisions of its own.
package console

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/opsbot/opsbot/bot"
)

// Console writes status threads to a terminal. The root status message is
// printed when posted and when final (intermediate edits would only scroll);
// step lines and results are printed indented under it. Safe for concurrent use.
type Console struct {
	mu   sync.Mutex
	w    io.Writer
	next int
	// Live prints every status edit, for interactive use.
	Live bool
	last map[string]string
}

// New returns a console writing to w.
func New(w io.Writer) *Console { return &Console{w: w, last: map[string]string{}} }

var _ bot.Chat = (*Console)(nil)

// Post prints a root message.
func (c *Console) Post(_ context.Context, room string, m bot.Message) (bot.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	ref := bot.Ref{Room: room, ID: strconv.Itoa(c.next)}
	c.last[ref.ID] = m.Text
	_, err := fmt.Fprintln(c.w, m.Text)
	return ref, err
}

// Edit prints the new status when it is final (or always, when Live).
func (c *Console) Edit(_ context.Context, ref bot.Ref, m bot.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !m.Final && !c.Live {
		return nil
	}
	if c.last[ref.ID] == m.Text {
		return nil
	}
	c.last[ref.ID] = m.Text
	if m.Final {
		delete(c.last, ref.ID)
	}
	_, err := fmt.Fprintln(c.w, m.Text)
	return err
}

// Reply prints m indented under its root.
func (c *Console) Reply(_ context.Context, ref bot.Ref, m bot.Message) (bot.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	text := m.Text
	if m.Image != nil {
		text += fmt.Sprintf("\n[image %s, %d bytes]", m.Image.Name, len(m.Image.PNG))
	}
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		b.WriteString("    ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(c.w, b.String())
	return bot.Ref{Room: ref.Room, ID: strconv.Itoa(c.next)}, err
}

// Notice prints a one-off line (usage errors, answers).
func (c *Console) Notice(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintln(c.w, text)
}

// Show prints a reply: its text, whoever it is for (a terminal has one
// reader). A queued job's reply is not printed: its status thread follows.
func (c *Console) Show(r bot.Reply) {
	if r.Outcome == bot.Queued {
		return
	}
	c.Notice(r.Text)
}

func (c *Console) prompt(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprint(c.w, p)
}
