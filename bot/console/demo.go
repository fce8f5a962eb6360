package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/opsbot/opsbot/bot"
)

// MaxLine is the longest input line the demo reads as a command; a longer
// one is answered "line too long" and skipped.
const MaxLine = bot.MaxInputLen

// DemoOptions configure Demo.
type DemoOptions struct {
	Bot     Bot
	Console *Console // where replies and status threads are shown
	User    string   // the console user id (auth key console:USER)
	In      io.Reader
	Intro   string // printed once before the first prompt
	// NoPrompt leaves out the "> " prompt: the input is not a terminal
	// (commands piped in), where a prompt would only trail the output.
	NoPrompt bool
}

// Demo is the prompt of `opsbot demo`: it reads commands from o.In, one a
// line, sends each through the bot and shows the replies; the jobs render
// their threads on the console as they run. `quit`, `exit` or the end of the
// input ends it once the jobs already started have finished (ctx ending
// stops waiting: the caller stops the jobs). A line longer than MaxLine is
// answered "line too long" and the next lines still run.
func Demo(ctx context.Context, o DemoOptions) error {
	c := o.Console
	if o.Intro != "" {
		c.Notice(o.Intro)
	}
	lines := make(chan inputLine)
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go readLines(readCtx, o.In, MaxLine, lines)
	for {
		if !o.NoPrompt {
			c.showPrompt("> ")
		}
		var in inputLine
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case in, ok = <-lines:
		}
		c.inputRead()
		if !ok {
			c.Notice("")
			finish(ctx, o.Bot, c)
			return nil
		}
		if in.err != nil {
			return fmt.Errorf("read input: %w", in.err)
		}
		if in.tooLong > 0 {
			c.Notice(fmt.Sprintf("line too long (%d bytes; a command has at most %d): ignored", in.tooLong, MaxLine))
			continue
		}
		line := strings.TrimSpace(in.text)
		if line == "" {
			continue
		}
		if line == "quit" || line == "exit" {
			finish(ctx, o.Bot, c)
			return nil
		}
		r := o.Bot.Handle(ctx, bot.Request{Platform: Platform, User: o.User, Room: Room, Text: line})
		c.Show(r)
	}
}

// finish waits until the jobs already started have ended, saying which it
// waits for, or until ctx ends (Ctrl-C, which stops them).
func finish(ctx context.Context, b Bot, c *Console) {
	ids := b.Active()
	if len(ids) == 0 {
		return
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprintf("#%d", id)
	}
	c.Notice(fmt.Sprintf("waiting for job %s to finish before quitting (Ctrl-C stops it)", strings.Join(s, ", ")))
	for _, id := range ids {
		if _, err := b.Wait(ctx, id); err != nil {
			return
		}
	}
}

// inputLine is one line of input, or how long a line over the limit was,
// or the read error that ended the input.
type inputLine struct {
	text    string
	tooLong int
	err     error
}

// readLines sends r's lines to out, each at most max bytes; a longer line is
// sent as its length only, never held in memory. It closes out at the end of
// the input.
func readLines(ctx context.Context, r io.Reader, max int, out chan<- inputLine) {
	defer close(out)
	br := bufio.NewReaderSize(r, 4096)
	send := func(l inputLine) bool {
		select {
		case out <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		var buf []byte
		n, nl := 0, 0
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			n += len(chunk)
			nl = trailingNewline(chunk)
			if n <= max+2 { // +2: a CRLF
				buf = append(buf, chunk...)
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		text := strings.TrimRight(string(buf), "\r\n")
		switch {
		case n == 0 && err != nil:
		case n > max+2 || len(text) > max:
			if !send(inputLine{tooLong: n - nl}) {
				return
			}
		default:
			if !send(inputLine{text: text}) {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				send(inputLine{err: err})
			}
			return
		}
	}
}

func trailingNewline(b []byte) int {
	if len(b) > 0 && b[len(b)-1] == '\n' {
		return 1
	}
	return 0
}

// TerminalAsk returns a yes/no question on the terminal, or nil when stdin is
// not one. "y", "yes" and the `confirm TOKEN` the question asks for are a yes.
func TerminalAsk(stdin io.Reader, stderr io.Writer) Ask {
	f, ok := stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return AskOn(stdin, stderr)
}

// AskOn asks on any reader and writer, as TerminalAsk does on a terminal.
func AskOn(in io.Reader, out io.Writer) Ask {
	r := bufio.NewReader(in)
	return func(q, token string) (bool, error) {
		fmt.Fprintf(out, "%s\nGo ahead? [y/N] ", q)
		line, err := r.ReadString('\n')
		if err != nil && line == "" {
			return false, err
		}
		return IsYes(line, token), nil
	}
}

// IsYes reports whether answer agrees to the confirmation of token: "y",
// "yes", or `confirm TOKEN` (as a chat would type it).
func IsYes(answer, token string) bool {
	a := strings.ToLower(strings.TrimSpace(answer))
	if a == "y" || a == "yes" {
		return true
	}
	f := strings.Fields(strings.TrimLeft(a, "/!"))
	return token != "" && len(f) == 2 && f[0] == "confirm" && f[1] == strings.ToLower(token)
}
