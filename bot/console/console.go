// Package console is the terminal chat adapter: `opsbot run` (Run) and the
// prompt of `opsbot demo` (Demo). Like any chat it talks to the bot through
// its inbound door (bot.Inbound) and renders the replies and the job status
// threads as text; it reads job outcomes from the bot (never the store) and
// makes no decisions of its own. It prints text plain (preformatted blocks
// without their Markdown fences), and in the demo keeps one status line per
// job state and its prompt below the output.
package console

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opsbot/opsbot/bot"
)

// Console writes status threads to a terminal. The root status message is
// printed when posted and when final (intermediate edits would only scroll),
// and whenever the job waits for a service another job or opsbot process
// holds (the status names the holder: "waiting for qwen: job #12 of opsbot
// on host1 (pid 4242) is changing it"), then once more when it has it
// (the next status, running); step lines and results are printed indented
// under it. Text is printed
// plain: preformatted blocks (bot.Pre) without their fences. Safe for
// concurrent use.
type Console struct {
	mu   sync.Mutex
	w    io.Writer
	next int
	// Live also prints the status edits that say what the step lines do not
	// (queued, waiting for a lock, running), for interactive use: once a
	// job's step lines print, its status is printed again only when final.
	Live bool
	// TTY says w is a terminal: a prompt is redrawn in place (erased before
	// output, printed again after it) instead of after a line break.
	TTY bool
	// WaitsOnly prints nothing but the waits: a status that says the job
	// waits for a holder and the status after it (the job has the
	// service). `opsbot run --json` writes these to stderr, its stdout
	// carrying only JSON.
	WaitsOnly bool
	// ChartDir is where a chart posted in a thread (a sweep's, a tune's) is
	// saved, as a new file whose path is printed in its place (SaveChart);
	// "" is the current directory.
	ChartDir string
	last     map[string]string
	steps    map[string]bool // roots whose step lines have been printed
	waited   map[string]bool // roots whose last printed status was waiting for a holder
	prompt   string          // the prompt on screen now ("" when none)
}

// New returns a console writing to w.
func New(w io.Writer) *Console {
	return &Console{w: w, last: map[string]string{}, steps: map[string]bool{}, waited: map[string]bool{}}
}

var (
	_ bot.Chat      = (*Console)(nil)
	_ bot.Transient = (*Console)(nil)
)

// Transient implements bot.Transient: nobody reads a terminal once opsbot
// has ended, so a schedule added here reports elsewhere.
func (c *Console) Transient() bool { return true }

// write prints text (plain) and a newline, moving a prompt on screen out of
// the way first and drawing it again after; c.mu is held.
func (c *Console) write(text string) error {
	if c.prompt != "" {
		if c.TTY {
			io.WriteString(c.w, "\r\x1b[K")
		} else {
			io.WriteString(c.w, "\n")
		}
	}
	_, err := fmt.Fprintln(c.w, bot.Plain(text))
	if c.prompt != "" {
		io.WriteString(c.w, c.prompt)
	}
	return err
}

// Post prints a root message.
func (c *Console) Post(_ context.Context, room string, m bot.Message) (bot.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	ref := bot.Ref{Room: room, ID: strconv.Itoa(c.next)}
	c.last[ref.ID] = m.Text
	if c.WaitsOnly {
		return ref, nil
	}
	return ref, c.write(hang(m.Text))
}

// statusIndent indents the lines of a root message after its first (a failed
// job's error under its status line) so that they read as part of it, set
// apart from the next message and from step lines (indented further).
const statusIndent = "   "

// hang indents text's lines after the first by statusIndent, dropping
// preformatted blocks' fences first.
func hang(text string) string {
	text = bot.Plain(text)
	if !strings.Contains(text, "\n") {
		return text
	}
	return strings.ReplaceAll(text, "\n", "\n"+statusIndent)
}

// Edit prints the new status when it is final, when it waits for a holder
// (bot.StatusWaiting) and the first status after such a wait (or, when
// Live, every status until the job's step lines print).
func (c *Console) Edit(_ context.Context, ref bot.Ref, m bot.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	waiting := m.Status == bot.StatusWaiting
	if !m.Final && !waiting && !c.waited[ref.ID] && (!c.Live || c.steps[ref.ID]) {
		return nil
	}
	if c.WaitsOnly && !waiting && !c.waited[ref.ID] {
		if m.Final {
			delete(c.last, ref.ID)
		}
		return nil
	}
	if c.last[ref.ID] == m.Text {
		return nil
	}
	c.last[ref.ID] = m.Text
	c.waited[ref.ID] = waiting
	if m.Final {
		delete(c.last, ref.ID)
		delete(c.steps, ref.ID)
		delete(c.waited, ref.ID)
	}
	return c.write(hang(m.Text))
}

// Reply prints m indented under its root; an image is saved in ChartDir and
// its path printed instead.
func (c *Console) Reply(_ context.Context, ref bot.Ref, m bot.Message) (bot.Ref, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	if c.WaitsOnly {
		return bot.Ref{Room: ref.Room, ID: strconv.Itoa(c.next)}, nil
	}
	if m.Kind == bot.KindStep {
		c.steps[ref.ID] = true
	}
	text := bot.Plain(m.Text)
	if m.Image != nil {
		if path, err := SaveChart(c.ChartDir, m.Image.Name, m.Image.PNG, time.Now()); err != nil {
			text += fmt.Sprintf("\nchart not saved: %v", err)
		} else {
			text += "\nchart: " + path
		}
	}
	var b strings.Builder
	for i, line := range strings.Split(text, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("    ")
		b.WriteString(line)
	}
	return bot.Ref{Room: ref.Room, ID: strconv.Itoa(c.next)}, c.write(b.String())
}

// Notice prints a one-off line (usage errors, answers).
func (c *Console) Notice(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.write(text)
}

// Show prints a reply: its text, whoever it is for (a terminal has one
// reader), and under a confirmation's preview that `y` confirms it. A queued
// job's reply is not printed: its status thread follows.
func (c *Console) Show(r bot.Reply) {
	switch r.Outcome {
	case bot.Queued:
		return
	case bot.NeedsConfirm:
		c.Notice(r.Text + "\n`y` confirms it here.")
		return
	}
	c.Notice(r.Text)
}

// showPrompt prints the prompt p and keeps it on screen: output printed while
// it shows moves it down (see write). inputRead says the line it asked for
// was entered: the prompt is gone from the screen's last line.
func (c *Console) showPrompt(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prompt = p
	fmt.Fprint(c.w, p)
}

func (c *Console) inputRead() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prompt = ""
}
