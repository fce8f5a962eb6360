package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/opsbot/opsbot/lab"
)

func cmdLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab", stderr)
	faults := fs.String("faults", "", lab.FaultHelp("comma-separated faults `LIST` to inject, e.g. orphans,slow-load=5s:"))
	unit := fs.String("unit", "", "seed the service's unit with this `FILE`")
	engine := fs.String("engine", "sglang", "engine of the default unit: sglang or vllm")
	configOut := fs.String("config-out", "", "write an opsbot config that reaches the lab to `FILE`")
	replicas := fs.Int("replicas", 0, "run qwen as `N` replicas (2 to 8, 4 GPUs each, the node's GPUs grown to fit) qwen@gpu1 ... behind the lab's router (SGLang Model Gateway's worker API), instead of qwen and coder")
	services := fs.Int("services", 0, "instead of qwen and coder, `N` SGLang services (1 to 1024) on N/4 Proxmox nodes (n1-s1 ... ), to measure how opsbot scales")
	perNode := fs.Int("per-node", 0, "with --services, `K` services on each node (1 to 8; default 4): N services on N/K nodes")
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
	if *perNode != 0 && *services == 0 {
		return usagef("--per-node goes with --services")
	}
	if *services != 0 {
		if *services < 1 || *services > lab.MaxFleetPerServices {
			return usagef("--services must be 1 to %d, got %d", lab.MaxFleetPerServices, *services)
		}
		if *perNode == 0 {
			*perNode = lab.PerNode
		}
		if *perNode < 1 || *perNode > 8 {
			return usagef("--per-node must be 1 to 8, got %d", *perNode)
		}
		if *unit != "" || *engine != "sglang" || *replicas != 0 {
			return usagef("--services makes SGLang services with their own units: leave out --unit, --engine and --replicas")
		}
		return runFleet(ctx, *services, *perNode, *faults, *configOut, stdout, stderr, *verbose)
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
	l, err := startLab(ctx, *faults, *unit, *engine, "", *replicas, newLogger(stderr, *verbose))
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

// runFleet is `opsbot lab --services N [--per-node K]`: N services on
// N/K simulated nodes. Once every service serves it prints a line starting
// "every service serves" (a benchmark driving the lab from another
// process waits for it).
func runFleet(ctx context.Context, n, perNode int, faults, configOut string, stdout, stderr io.Writer, verbose bool) error {
	fl, err := lab.ParseFaults(faults)
	if err != nil {
		return usagef("%v", err)
	}
	f, err := lab.StartFleetPer(ctx, n, perNode, lab.Options{Faults: fl, Logger: newLogger(stderr, verbose)})
	if err != nil {
		return err
	}
	defer f.Close()
	if configOut != "" {
		abs, err := filepath.Abs(configOut)
		if err != nil {
			return err
		}
		path, err := f.WriteConfig(filepath.Dir(abs))
		if err != nil {
			return err
		}
		if path != abs {
			if err := os.Rename(path, abs); err != nil {
				return fmt.Errorf("write config: %w", err)
			}
		}
		fmt.Fprintf(stdout, "config written to %s\n", abs)
	}
	for _, l := range f.Labs {
		fmt.Fprintln(stdout, l.Describe())
	}
	fmt.Fprintf(stdout, "lab fleet of %d services on %d nodes running; Ctrl-C stops it\n", n, len(f.Labs))
	if err := f.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintf(stdout, "every service serves (%d on %d nodes)\n", n, len(f.Labs))
	<-ctx.Done()
	return nil
}
