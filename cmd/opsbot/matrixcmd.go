package main

import (
	"context"
	"fmt"
	"io"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/store"
)

// cmdMatrix is `opsbot matrix recovery-key [--config FILE]`.
func cmdMatrix(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const use = "usage: opsbot matrix recovery-key [--config FILE]"
	if len(args) == 0 {
		return usagef(use)
	}
	switch args[0] {
	case "recovery-key":
		return cmdMatrixRecoveryKey(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		return &helpRequest{text: use + "\n\nopsbot matrix recovery-key --help explains it.\n"}
	}
	return usagef("%s\nunknown matrix subcommand %q", use, args[0])
}

// cmdMatrixRecoveryKey prints the recovery key of matrix.user_id's account
// that the config's store keeps (sealed), on stdout.
func cmdMatrixRecoveryKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("matrix recovery-key", stderr)
	configPath := fs.String("config", defaultConfig, "config `FILE` naming the store and matrix.user_id")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("opsbot matrix recovery-key takes no arguments (got %q)", fs.Arg(0))
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	if cfg.Matrix == nil || !cfg.Matrix.Enabled || cfg.Matrix.UserID == "" {
		return fmt.Errorf("%s has no enabled matrix section: the recovery key is the Matrix account's", *configPath)
	}
	s, err := store.OpenConfig(ctx, bot.StoreConfig(cfg))
	if err != nil {
		return err
	}
	defer s.Close()
	rk, err := matrix.RecoveryKey(ctx, s, cfg.Matrix.UserID)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, rk)
	fmt.Fprintf(stderr, "the recovery key of %s's cross-signing keys (in %s): keep a copy where the team keeps secrets; "+
		"a new store or a second machine signs its device with it in matrix.recovery_key\n", cfg.Matrix.UserID, s.Name())
	return nil
}
