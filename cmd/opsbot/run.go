package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/term"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/console"
	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/lab"
)

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	stdout = &lockedWriter{w: stdout} // jobs render from their own goroutines
	fs := newFlagSet("run", stderr)
	configPath := fs.String("config", "", "config `FILE`")
	useLab := fs.Bool("lab", false, "run on the simulated GPU host (the lab), with a store that lasts this run only; --config FILE --lab keeps FILE's store")
	labFaults := fs.String("lab-faults", "", lab.FaultHelp("comma-separated lab faults `LIST`, e.g. orphans,slow-load=5s (they apply to both services):"))
	labUnit := fs.String("lab-unit", "", "seed the lab service's unit with this `FILE`")
	labReplicas := fs.Int("lab-replicas", 0, "run the lab's qwen as `N` replicas (2 to 8, 4 GPUs each) qwen@gpu1 ... behind the lab's router, instead of qwen and coder")
	asJSON := fs.Bool("json", false, "print one JSON object per command per line (a chart's file in \"chart_path\")")
	chartDir := fs.String("chart-dir", ".", "save charts (sweeps, tunes) as new files in `DIR`")
	as := fs.String("as", "", "act as console user `ID` (auth key console:ID); needs the admin role for your OS user")
	yes := fs.Bool("yes", false, "answer confirmations with yes")
	verbose := fs.Bool("v", false, "verbose logging to stderr")
	cmds, err := parseInterleaved(fs, args)
	if err != nil {
		return 2, err
	}
	if len(cmds) == 0 {
		return 2, usagef("no command given, e.g. opsbot run --lab 'mtp steps 10'")
	}
	if *configPath == "" {
		// help needs no hosts: answer it without a config, and without
		// booting the lab (whose store lasts this run only).
		if text, ok := helpOnly(cmds); ok {
			fmt.Fprint(stdout, text)
			return 0, nil
		}
	}
	charts, err := checkChartDir(*chartDir, flagGiven(fs, "chart-dir"))
	if err != nil {
		return 2, err
	}
	// Without --json the thread prints to stdout; with it stdout carries
	// only JSON, and stderr says when a job waits for another's service
	// and when it has it.
	con := console.New(stdout)
	con.ChartDir = charts
	if *asJSON {
		con = console.New(stderr)
		con.WaitsOnly = true
	}
	chats := map[string]bot.Chat{console.Platform: con}
	// The lab's engines load while the commands are parsed; a job waits for
	// them (Ready), `jobs` and `help` do not.
	e, err := setup(ctx, setupOptions{ConfigPath: *configPath, Lab: *useLab, LabFaults: *labFaults, LabUnit: *labUnit, LabReplicas: *labReplicas,
		Chats: chats, Logger: newLogger(stderr, *verbose), LabLater: true})
	if err != nil {
		return 1, err
	}
	defer e.Close()
	// Ctrl-C or SIGTERM (ctx ends) stops the jobs, as opsbot shutting down,
	// and waits for each to report its final message: what it did and the
	// state it left its service in. Commands not yet begun are refused.
	stopJobs := context.AfterFunc(ctx, func() {
		if ids := e.app.Active(); len(ids) > 0 {
			fmt.Fprintf(stderr, "opsbot: interrupted: stopping job %s; it reports the state it leaves its service in (Ctrl-C again quits at once)\n", jobList(ids))
		}
		// Stop every job at its next safe point now (the signal gives no
		// grace), and let each record and print its final state.
		now, cancel := context.WithCancel(context.Background())
		cancel()
		e.app.Engine.Shutdown(now)
	})
	defer stopJobs()
	return console.Run(context.WithoutCancel(ctx), console.RunOptions{Bot: e.app, OSUser: defaultUser(), As: *as, JSON: *asJSON, Yes: *yes,
		ChartDir: charts, Ask: console.TerminalAsk(stdin, stderr), Out: stdout, Err: stderr, Invocation: invocation(fs),
		Ready: e.labReady}, cmds), nil
}

// helpOnly answers cmds when every one is a `help` chat command, as the bot
// would (help depends on no config), and reports whether it did.
func helpOnly(cmds []string) (string, bool) {
	var b strings.Builder
	for _, text := range cmds {
		c, err := commands.Parse(text, commands.Options{})
		help, ok := c.(*commands.HelpCmd)
		if err != nil || !ok {
			return "", false
		}
		h, err := commands.Help(help.Topic)
		if err != nil {
			return "", false
		}
		b.WriteString(strings.TrimRight(h, "\n") + "\n")
	}
	return b.String(), true
}

// invocation is `opsbot run` with the flags given, quoted for a shell, for
// hints that show how to type a command.
func invocation(fs *flag.FlagSet) string {
	parts := []string{fs.Name()}
	fs.Visit(func(f *flag.Flag) {
		if isBoolFlag(f) {
			parts = append(parts, "--"+f.Name)
			return
		}
		parts = append(parts, "--"+f.Name, console.ShellQuote(f.Value.String()))
	})
	return strings.Join(parts, " ")
}

// jobList renders job ids as "#3" or "#3, #4".
func jobList(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprintf("#%d", id)
	}
	return strings.Join(s, ", ")
}

func cmdDemo(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	tty := isTerminal(stdout)
	stdout = &lockedWriter{w: stdout} // jobs render from their own goroutines
	fs := newFlagSet("demo", stderr)
	labFaults := fs.String("lab-faults", "", lab.FaultHelp("comma-separated lab faults `LIST`, e.g. orphans,slow-load=5s (they apply to both services):"))
	labUnit := fs.String("lab-unit", "", "seed the lab service's unit with this `FILE`")
	labReplicas := fs.Int("lab-replicas", 0, "run the lab's qwen as `N` replicas (2 to 8, 4 GPUs each) qwen@gpu1 ... behind the lab's router, instead of qwen and coder")
	chartDir := fs.String("chart-dir", ".", "save charts (sweeps, tunes) as new files in `DIR`")
	verbose := fs.Bool("v", false, "verbose logging to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("demo takes no arguments; type commands at its prompt")
	}
	charts, err := checkChartDir(*chartDir, flagGiven(fs, "chart-dir"))
	if err != nil {
		return err
	}
	con := console.New(stdout)
	con.ChartDir = charts
	con.Live = true
	con.TTY = tty
	e, err := setup(ctx, setupOptions{Lab: true, LabFaults: *labFaults, LabUnit: *labUnit, LabReplicas: *labReplicas,
		Chats: map[string]bot.Chat{console.Platform: con}, Logger: newLogger(stderr, *verbose)})
	if err != nil {
		return err
	}
	defer e.Close()
	return console.Demo(ctx, console.DemoOptions{Bot: e.app, Console: con, User: defaultUser(), In: stdin, NoPrompt: !readerIsTerminal(stdin),
		Intro: fmt.Sprintf("opsbot demo on the lab (simulated GPU host).\n%s\nType commands (help, mtp steps 10, gpu status, gpu recover, ...); y confirms what asks for confirmation; quit or Ctrl-D ends it once the jobs started have finished.",
			e.lab.Describe())})
}

// checkChartDir returns dir (--chart-dir) as an absolute path, so that the
// paths printed of the charts saved there are. A directory the user named
// (given) is created when missing (with its parents, 0755), and must take a
// chart before anything runs, else a usage error names it and why. The
// default, the current directory, is not probed: most runs make no chart,
// and a run from a directory that cannot take one says so in the thread of
// the chart it could not save.
func checkChartDir(dir string, given bool) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usagef("--chart-dir %s: %v; nothing was run", dir, err)
	}
	if !given {
		return abs, nil
	}
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return "", usagef("charts cannot be saved in %s: creating it failed (%v); nothing was run", abs, err)
		}
	}
	if err := console.CheckChartDir(abs); err != nil {
		return "", usagef("%v; nothing was run", err)
	}
	return abs, nil
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

// readerIsTerminal reports whether r is a terminal.
func readerIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
