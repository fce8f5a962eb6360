// Command opsbot is the chat-ops bot for LLM inference servers under systemd.
//
//	opsbot run [--config FILE | --lab [--lab-faults LIST] [--lab-unit FILE]] [--json] [--as ID] [--yes] 'CMD' ...
//	opsbot demo [--lab-faults LIST] [--lab-unit FILE]
//	opsbot lab [--faults LIST] [--unit FILE] [--engine sglang|vllm] [--config-out FILE]
//	opsbot bench --url URL | --config FILE --service NAME [--model M] [--prompts N] [--concurrency C] [--in I] [--out O] [--rate R] [--json]
//	opsbot config check --config FILE
//	opsbot serve --config FILE [--lab [--lab-faults LIST] [--lab-unit FILE]]
//	opsbot store backup [--config FILE] DEST
//	opsbot health [--url URL]
//	opsbot version
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
	"syscall"
)

const usage = `opsbot: chat-ops for LLM inference servers (SGLang, vLLM) under systemd

usage:
  opsbot run [--config FILE | --lab [--lab-faults LIST] [--lab-unit FILE]] [--json] [--as ID] [--yes] 'CMD' ['CMD' ...]
  opsbot demo [--lab-faults LIST] [--lab-unit FILE]
  opsbot lab [--faults LIST] [--unit FILE] [--engine sglang|vllm] [--config-out FILE]
  opsbot bench --url URL | --config FILE --service NAME [--model M] [--prompts N] [--concurrency C] [--in I] [--out O] [--rate R] [--json]
  opsbot config check --config FILE
  opsbot serve --config FILE [--lab [--lab-faults LIST] [--lab-unit FILE]]
  opsbot store backup [--config FILE] DEST
  opsbot health [--url URL]
  opsbot version

Commands (the same in Slack, Matrix and here): run 'help' to list them:
  opsbot run --lab help
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError marks errors that exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
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
		err = cmdConfig(ctx, args[1:], stdout)
	case "serve":
		err = cmdServe(ctx, args[1:], stderr)
	case "store":
		err = cmdStore(ctx, args[1:], stdout, stderr)
	case "health":
		err = cmdHealth(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		err = cmdVersion(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "opsbot: unknown command %q\n\n%s", args[0], usage)
		return 2
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

// parseFlags parses args into fs. A bad flag is a usage error (exit 2) whose
// message the flag package has already printed with the flags' help.
func parseFlags(fs *flag.FlagSet, args []string) error {
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
	return fs
}
