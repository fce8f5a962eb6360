package main

import (
	"fmt"
	"io"

	"github.com/opsbot/opsbot/config"
)

func cmdConfig(args []string, stdout io.Writer) error {
	if wantsHelp(args) {
		fs := newFlagSet("config", io.Discard)
		fs.String("config", "", "config `FILE` to check")
		return &helpRequest{text: helpText(fs)}
	}
	if len(args) == 0 || args[0] != "check" {
		return usagef("usage: opsbot config check --config FILE")
	}
	fs := newFlagSet("config check", io.Discard)
	path := fs.String("config", "", "config `FILE`")
	if err := fs.Parse(args[1:]); err != nil {
		return usagef("usage: opsbot config check --config FILE")
	}
	if *path == "" || fs.NArg() > 0 {
		return usagef("usage: opsbot config check --config FILE")
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	out, err := cfg.Redacted()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# %s: valid (secrets redacted)\n%s", *path, out)
	return nil
}
