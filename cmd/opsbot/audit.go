package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/store"
)

// cmdAudit is `opsbot audit export` and `opsbot audit verify`: the audit
// log's chain (store/auditchain.go) for an auditor.
func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const use = "usage: opsbot audit export [--config FILE] --since WHEN [--until WHEN]\n" +
		"       opsbot audit verify FILE | --config FILE"
	if len(args) == 0 {
		return usagef(use)
	}
	switch args[0] {
	case "export":
		return cmdAuditExport(ctx, args[1:], stdout, stderr)
	case "verify":
		return cmdAuditVerify(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		return &helpRequest{text: use + "\n\nopsbot audit export --help and opsbot audit verify --help explain each.\n"}
	}
	return usagef("%s\nunknown audit subcommand %q", use, args[0])
}

// cmdAuditExport is `opsbot audit export [--config FILE] --since WHEN
// [--until WHEN]`: the entries of that window and every entry between
// them, one JSON object a line on stdout; what it wrote on stderr.
func cmdAuditExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit export", stderr)
	configPath := fs.String("config", defaultConfig, "config `FILE` naming the store")
	sinceText := fs.String("since", "", "the first entry: written at or after `WHEN`, a duration before now (90m, 36h, 30d) or an RFC 3339 time")
	untilText := fs.String("until", "", "the last entry: written before `WHEN` (as --since); default: up to the newest")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("opsbot audit export takes no arguments (got %q): the entries go to stdout", fs.Arg(0))
	}
	if *sinceText == "" {
		return usagef("opsbot audit export needs --since (for example --since 30d, or --since 2026-01-01T00:00:00Z)")
	}
	now := time.Now()
	since, err := parseWhen(*sinceText, now)
	if err != nil {
		return usagef("--since: %s", err)
	}
	var until time.Time
	if *untilText != "" {
		if until, err = parseWhen(*untilText, now); err != nil {
			return usagef("--until: %s", err)
		}
		if !until.After(since) {
			return usagef("--until %s is not after --since %s", until.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
		}
	}
	s, err := openAuditStore(ctx, *configPath)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.ExportAudit(ctx, stdout, since, until)
	if err != nil {
		return err
	}
	if rep.Entries == 0 {
		fmt.Fprintf(stderr, "no audit entries in %s since %s\n", s.Name(), since.UTC().Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(stderr, "exported %d audit entries (ids %d..%d) from %s; the last one's hash is %s\n"+
		"check the file with: opsbot audit verify FILE\n", rep.Entries, rep.First, rep.Last, s.Name(), rep.LastHash)
	return nil
}

// cmdAuditVerify is `opsbot audit verify FILE | --config FILE`: checks an
// export, or the store itself, and names the first entry that does not
// match (exit 1).
func cmdAuditVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit verify", stderr)
	configPath := fs.String("config", "", "verify the store this config `FILE` names (instead of an export)")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) == 1 && *configPath == "":
		return verifyFile(rest[0], stdout)
	case len(rest) == 0 && *configPath != "":
		s, err := openAuditStore(ctx, *configPath)
		if err != nil {
			return err
		}
		defer s.Close()
		rep, err := s.VerifyAudit(ctx)
		if err != nil {
			return brokenChain(err, "the store "+s.Name())
		}
		anchor := "the genesis"
		if rep.Anchor != store.GenesisHash {
			anchor = "the last pruned entry, hash " + rep.Anchor
		}
		fmt.Fprintf(stdout, "audit log of %s verified: %s, chained from %s up to the head", s.Name(), entries(rep), anchor)
		printLast(stdout, rep)
		return nil
	}
	return usagef("usage: opsbot audit verify FILE | --config FILE (one of them)")
}

func verifyFile(path string, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := store.VerifyAuditFile(f)
	if err != nil {
		return brokenChain(err, path)
	}
	fmt.Fprintf(stdout, "%s verified: %s, each linked to the one before it", path, entries(rep))
	if rep.Entries > 0 {
		fmt.Fprintf(stdout, "; the first links to hash %s (what comes before the file is not in it)", rep.Anchor)
	}
	printLast(stdout, rep)
	return nil
}

// entries says how many entries a report covered.
func entries(rep store.ChainReport) string {
	var b strings.Builder
	switch rep.Entries {
	case 0:
		b.WriteString("no chained entries")
	case 1:
		fmt.Fprintf(&b, "1 entry (id %d)", rep.First)
	default:
		fmt.Fprintf(&b, "%d entries (ids %d..%d)", rep.Entries, rep.First, rep.Last)
	}
	if rep.Before > 0 {
		fmt.Fprintf(&b, ", and %d from before the chain, not covered", rep.Before)
	}
	return b.String()
}

func printLast(w io.Writer, rep store.ChainReport) {
	if rep.Entries == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "\nlast entry %d, hash %s: keep it; a later export that holds entry %d must show this hash\n", rep.Last, rep.LastHash, rep.Last)
}

// brokenChain turns a verification's error into what to say: for a broken
// chain, where it broke and what that means.
func brokenChain(err error, what string) error {
	if !errors.Is(err, store.ErrChainBroken) {
		return err
	}
	return fmt.Errorf("%s: %w\nThe entries before it match. Compare it with an earlier export or a backup of the store to see what was changed", what, err)
}

func openAuditStore(ctx context.Context, configPath string) (*store.Store, error) {
	cfg, err := config.Load(configPath)
	if err != nil {
		return nil, err
	}
	return store.OpenConfig(ctx, bot.StoreConfig(cfg))
}

// parseWhen reads --since and --until: a duration before now (Go's form,
// 90m or 36h, or whole days, 30d) or an RFC 3339 time.
func parseWhen(text string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, text); err == nil {
		return t, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(text, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100000 {
			return time.Time{}, fmt.Errorf("%q is not a duration (90m, 36h, 30d) nor an RFC 3339 time (2026-01-01T00:00:00Z)", text)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(text); err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("%q is not a duration (90m, 36h, 30d) nor an RFC 3339 time (2026-01-01T00:00:00Z)", text)
		}
	}
	return now.Add(-d), nil
}
