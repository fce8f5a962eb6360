package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func cmdLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab", stderr)
	faults := fs.String("faults", "", "faults to inject, e.g. orphans,slow-load=5s")
	unit := fs.String("unit", "", "seed the service's unit with this `FILE`")
	engine := fs.String("engine", "sglang", "engine of the default unit: sglang or vllm")
	configOut := fs.String("config-out", "", "write an opsbot config that reaches the lab to `FILE`")
	verbose := fs.Bool("v", false, "verbose logging to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *engine != "sglang" && *engine != "vllm" {
		return usagef("--engine must be sglang or vllm, got %q", *engine)
	}
	dir := ""
	if *configOut != "" {
		abs, err := filepath.Abs(*configOut)
		if err != nil {
			return err
		}
		dir = filepath.Dir(abs)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	l, err := startLab(ctx, *faults, *unit, *engine, "", newLogger(stderr, *verbose))
	if err != nil {
		return err
	}
	defer l.Close()
	if *configOut != "" {
		path, err := l.WriteConfig(dir)
		if err != nil {
			return fmt.Errorf("write config: %w", err)
		}
		if path != *configOut {
			if abs, _ := filepath.Abs(*configOut); abs != path {
				if err := os.Rename(path, abs); err != nil {
					return fmt.Errorf("write config: %w", err)
				}
				path = abs
			}
		}
		fmt.Fprintf(stdout, "config written to %s\n  opsbot run --config %s 'gpu status'\n", path, path)
	}
	fmt.Fprintln(stdout, l.Describe())
	fmt.Fprintln(stdout, "lab running; Ctrl-C stops it")
	<-ctx.Done()
	return nil
}
