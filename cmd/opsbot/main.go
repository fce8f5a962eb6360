// Command opsbot is the chat-ops bot for LLM inference servers under systemd.
// `opsbot --help` lists its subcommands (run, demo, lab, bench, config check,
// serve, store backup, store copy, audit export, audit verify, matrix
// recovery-key, health, version); each explains itself with --help.
//
// This file only parses flags and wires packages together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext is cancelled by the first SIGINT or SIGTERM: `opsbot run`
// then stops its jobs and prints how each left its service. After that first
// signal the default action is back, so a second one ends the process at once.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// usageError marks errors that exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, overview())
		return 2
	}
	var err error
	code := 0
	switch args[0] {
	case "run":
		code, err = cmdRun(ctx, args[1:], stdin, stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdin, stdout, stderr)
	case "lab":
		err = cmdLab(ctx, args[1:], stdout, stderr)
	case "bench":
		code, err = cmdBench(ctx, args[1:], stdout, stderr)
	case "config":
		err = cmdConfig(ctx, args[1:], stdout, stderr)
	case "serve":
		err = cmdServe(ctx, args[1:], stderr)
	case "store":
		err = cmdStore(ctx, args[1:], stdout, stderr)
	case "audit":
		err = cmdAudit(ctx, args[1:], stdout, stderr)
	case "matrix":
		err = cmdMatrix(ctx, args[1:], stdout, stderr)
	case "health":
		err = cmdHealth(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		err = cmdVersion(args[1:], stdout)
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" && args[1] != "help" {
			return run(ctx, []string{args[1], "--help"}, stdin, stdout, stderr)
		}
		fmt.Fprint(stdout, overview())
		return 0
	default:
		fmt.Fprintf(stderr, "opsbot: unknown command %q\n\n%s", args[0], overview())
		return 2
	}
	if text, ok := isHelp(err); ok {
		fmt.Fprint(stdout, text)
		return 0
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
			if !errors.Is(err, flag.ErrHelp) && err.Error() != "" {
				fmt.Fprintf(stderr, "opsbot %s: %s\n", args[0], err)
			}
			return 2
		}
		fmt.Fprintf(stderr, "opsbot %s: %s\n", args[0], err)
		return 1
	}
	return code
}

func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// parseFlags parses args into fs. -h or --help is a *helpRequest (exit 0,
// the help on stdout); a bad flag is a usage error (exit 2) whose message the
// flag package has already printed with the subcommand's help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if wantsHelp(args) {
		return &helpRequest{text: helpText(fs)}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{}
	}
	return nil
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("opsbot "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	printUsageTo(fs, stderr)
	return fs
}

// parseInterleaved is parseFlags for a subcommand whose positional arguments
// may have flags of fs after them (`opsbot run 'mtp steps 4' --lab`): the
// flag package stops at the first non-flag, so the flags are picked out here
// wherever they stand and the positional arguments are returned in order.
// "--" ends the flags. A word that looks like a flag fs lacks, after a
// positional argument, is returned as a positional argument (it belongs to
// the chat command before it, unquoted), so the caller can say how to quote it.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	if wantsHelp(args) {
		return nil, &helpRequest{text: helpText(fs)}
	}
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil && len(pos) > 0 {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		if f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := parseFlags(fs, flags); err != nil {
		return nil, err
	}
	return pos, nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
