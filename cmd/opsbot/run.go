package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/console"
)

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	stdout = &lockedWriter{w: stdout} // jobs render from their own goroutines
	fs := newFlagSet("run", stderr)
	configPath := fs.String("config", "", "config `FILE`")
	useLab := fs.Bool("lab", false, "run on the simulated GPU host (the lab)")
	labFaults := fs.String("lab-faults", "", "lab faults, e.g. orphans,slow-load=5s")
	labUnit := fs.String("lab-unit", "", "seed the lab service's unit with this `FILE`")
	asJSON := fs.Bool("json", false, "print one JSON object per command per line")
	as := fs.String("as", defaultUser(), "console user `ID` (auth key console:ID)")
	yes := fs.Bool("yes", false, "answer confirmations with yes")
	verbose := fs.Bool("v", false, "verbose logging to stderr")
	if err := parseFlags(fs, args); err != nil {
		return 2, err
	}
	cmds := fs.Args()
	if len(cmds) == 0 {
		return 2, usagef("no command given, e.g. opsbot run --lab 'mtp steps 10'")
	}
	chats := map[string]bot.Chat{}
	if !*asJSON {
		chats[console.Platform] = console.New(stdout)
	}
	e, err := setup(ctx, setupOptions{ConfigPath: *configPath, Lab: *useLab, LabFaults: *labFaults, LabUnit: *labUnit,
		Chats: chats, Logger: newLogger(stderr, *verbose)})
	if err != nil {
		return 1, err
	}
	defer e.Close()
	return console.Run(ctx, console.RunOptions{Dispatcher: e.app.Dispatcher, Engine: e.app.Engine, Store: e.app.Store,
		User: *as, JSON: *asJSON, Yes: *yes, Ask: terminalAsk(stdin, stderr), Out: stdout, Err: stderr}, cmds), nil
}

func cmdDemo(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	stdout = &lockedWriter{w: stdout} // jobs render from their own goroutines
	fs := newFlagSet("demo", stderr)
	labFaults := fs.String("lab-faults", "", "lab faults, e.g. orphans,slow-load=5s")
	labUnit := fs.String("lab-unit", "", "seed the lab service's unit with this `FILE`")
	verbose := fs.Bool("v", false, "verbose logging to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("demo takes no arguments; type commands at its prompt")
	}
	con := console.New(stdout)
	con.Live = true
	e, err := setup(ctx, setupOptions{Lab: true, LabFaults: *labFaults, LabUnit: *labUnit,
		Chats: map[string]bot.Chat{console.Platform: con}, Logger: newLogger(stderr, *verbose)})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(stdout, "opsbot demo on the lab (simulated GPU host).\n%s\nType commands (help, mtp steps 10, gpu status, gpu recover, ...); confirm with `confirm TOKEN`; Ctrl-D quits.\n",
		e.lab.Describe())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		fmt.Fprint(stdout, "> ")
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case line, ok = <-lines:
			if !ok {
				// End of input: let the jobs already started finish (Ctrl-C stops them).
				fmt.Fprintln(stdout)
				for _, id := range e.app.Engine.Active() {
					if _, err := e.app.Engine.Wait(ctx, id); err != nil {
						return nil
					}
				}
				return nil
			}
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if line == "quit" || line == "exit" {
			return nil
		}
		r := e.app.Dispatcher.Handle(ctx, bot.Request{Platform: console.Platform, User: defaultUser(), Room: console.Room, Text: line})
		if r.Outcome != bot.Queued {
			con.Notice(r.Text)
		}
	}
}

// lockedWriter serialises writes from several goroutines to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
