package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/store"
)

// adapters are the chat adapters this build has, by config section. The
// terminal (opsbot run, opsbot demo) needs no section.
var adapters = map[string]bool{"slack": true, "matrix": true}

// adapterNames are the platforms' names as operators write them.
var adapterNames = map[string]string{"slack": "Slack", "matrix": "Matrix"}

// cmdConfig is `opsbot config check --config FILE`: every problem the bot
// would meet at start-up or at its first job, listed at once, one per line
// with its key; or the effective config with secrets redacted. Warnings
// (config.Config.Warnings) go to stderr either way and do not fail it.
func cmdConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("config check", io.Discard)
	path := fs.String("config", "", "config `FILE` to check")
	withLab := fs.Bool("lab", false, "check FILE as opsbot serve --lab (and run --config FILE --lab) run it: on top of the lab's config")
	if wantsHelp(args) {
		return &helpRequest{text: helpText(fs)}
	}
	if len(args) == 0 || args[0] != "check" {
		return usagef("usage: opsbot config check --config FILE [--lab]")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return usagef("usage: opsbot config check --config FILE [--lab]")
	}
	if *path == "" || fs.NArg() > 0 {
		return usagef("usage: opsbot config check --config FILE [--lab]")
	}
	var cfg *config.Config
	var err error
	if *withLab {
		// The lab supplies its keys: check the file as serve --lab loads it.
		ls, lerr := startLabConfig(ctx, setupOptions{ConfigPath: *path, Lab: true})
		if lerr != nil {
			return lerr
		}
		cfg, err = loadConfig(*path, ls.cfg, nil)
		defer ls.Close()
		if err != nil {
			return err
		}
	} else {
		cfg, err = config.Inspect(*path)
	}
	var problems []error
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		problems = append(problems, ce.Problems...)
	case err != nil:
		return err
	}
	problems = append(problems, checkResources(ctx, cfg, storeProblem(problems))...)
	if cfg != nil {
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stderr, "opsbot config: warning: %s\n", w)
		}
	}
	if len(problems) > 0 {
		return &config.Error{Problems: problems}
	}
	out, err := cfg.Redacted()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# %s: valid (secrets redacted)\n%s", *path, out)
	return nil
}

// checkResources checks what the config names outside itself: adapters this
// build lacks, the SSH key and known_hosts files, and the store.
// A store the config's own problems already name (an unset
// ${OPSBOT_DATABASE_URL}) is not opened: its error would only repeat them
// less clearly (skipStore).
func checkResources(ctx context.Context, cfg *config.Config, skipStore bool) []error {
	var problems []error
	for _, a := range cfg.EnabledAdapters() {
		if !adapters[a] {
			problems = append(problems, fmt.Errorf("%s.enabled: this build of opsbot has no %s adapter yet", a, adapterNames[a]))
		}
	}
	if cfg.SSH.KeyFile != "" {
		if _, err := remote.LoadSigner(cfg.SSH.KeyFile); errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Errorf("ssh.key_file: %s does not exist: create the bot's key with ssh-keygen -t ed25519 -N '' -f %s and authorise its .pub on every host (%w)",
				cfg.SSH.KeyFile, cfg.SSH.KeyFile, err))
		} else if err != nil {
			problems = append(problems, fmt.Errorf("ssh.key_file: %w", err))
		}
	}
	if cfg.SSH.KnownHosts != "" {
		if err := remote.CheckKnownHosts(cfg.SSH.KnownHosts); errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Errorf("ssh.known_hosts: %s does not exist: add each host's key with ssh-keyscan -H HOST >> %s, after checking it (%w)",
				cfg.SSH.KnownHosts, cfg.SSH.KnownHosts, err))
		} else if err != nil {
			problems = append(problems, fmt.Errorf("ssh.known_hosts: %w", err))
		} else {
			problems = append(problems, unknownHosts(cfg)...)
		}
	}
	switch {
	case skipStore:
	case cfg.Store.Driver == config.StorePostgres && cfg.Store.URL != "":
		if err := store.CheckConfig(ctx, bot.StoreConfig(cfg)); err != nil {
			problems = append(problems, fmt.Errorf("store.url: %w", err))
		}
	case cfg.Store.Path != "":
		if err := store.CheckFile(ctx, cfg.Store.Path); err != nil {
			problems = append(problems, fmt.Errorf("store.path: %w", err))
		}
	}
	return problems
}

// unknownHosts names each configured host whose address has no key in the
// known_hosts file, with the ssh-keyscan line that adds it: without one,
// every job on that host fails at its first connection.
func unknownHosts(cfg *config.Config) []error {
	names := make([]string, 0, len(cfg.Hosts))
	for name := range cfg.Hosts {
		names = append(names, name)
	}
	sort.Strings(names)
	var problems []error
	for _, name := range names {
		addr := cfg.Hosts[name].Addr
		known, err := remote.KnownHostsHas(cfg.SSH.KnownHosts, addr)
		if err != nil {
			problems = append(problems, fmt.Errorf("hosts.%s: %w", name, err))
			continue
		}
		if !known {
			var via []remote.HostConfig
			if j, ok := cfg.Hosts[cfg.Hosts[name].Jump]; ok {
				via = append(via, remote.HostConfig{Addr: j.Addr, User: j.User})
			}
			problems = append(problems, fmt.Errorf("hosts.%s: %s has no key for %s, so every job on %s fails at its first connection: "+
				"add it with `%s`, after checking the host's key fingerprint out of band (on the host: `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`)",
				name, cfg.SSH.KnownHosts, addr, name, remote.KeyscanCommand(addr, "", cfg.SSH.KnownHosts, via...)))
		}
	}
	return problems
}

// storeProblem reports whether one of problems is about the store's keys.
func storeProblem(problems []error) bool {
	for _, p := range problems {
		if strings.HasPrefix(p.Error(), "store.") {
			return true
		}
	}
	return false
}
