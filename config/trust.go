package config

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The files that decide trust, and the one recipe for them (README "Point it
// at a real host", deploy/opsbot.service, the Dockerfile and
// deploy/opsbot.example.yaml say the same):
//
//	/etc/opsbot              0750 root:opsbot  (in a container: root:65532)
//	/etc/opsbot/opsbot.yaml  0640 root:opsbot  no literal secret: ${ENV} or file:
//	/etc/opsbot/known_hosts  0644 root:root    decides which host is genuine
//	/etc/opsbot/id_ed25519   0640 root:opsbot  OpenSSH's rule: see remote.LoadSigner
//	/etc/opsbot/env          0600 root:root    the unit's EnvironmentFile=, read by systemd as root
//
// A file any user may write is refused (the config, known_hosts); one the
// group may write, or one holding a secret that others may read, gets a
// warning naming the file and the fix.

// EnvFileName is the environment file opsbot looks for beside its config:
// deploy/opsbot.service reads /etc/opsbot/env (EnvironmentFile=) for the
// config at /etc/opsbot/opsbot.yaml.
const EnvFileName = "env"

// worldWritable refuses a file every user may write; path names it in the
// message as the operator wrote it.
func worldWritable(path string, fi fs.FileInfo, what string) error {
	return fmt.Errorf("%s is writable by every user (mode %04o): anyone on this machine could change %s; run: chmod o-w %s",
		path, uint32(fi.Mode().Perm()), what, path)
}

// knownHostsTrust checks the known_hosts file's mode: world-writable is a
// problem, group-writable a warning. A file that cannot be read is reported
// elsewhere (it is required at start, and by config check).
func (c *Config) knownHostsTrust() (warning string, problem error) {
	p := c.SSH.KnownHosts
	if p == "" {
		return "", nil
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", nil
	}
	what := "which SSH hosts opsbot trusts as genuine when it logs in as root"
	switch mode := fi.Mode().Perm(); {
	case mode&0o002 != 0:
		return "", fmt.Errorf("ssh.known_hosts: %w", worldWritable(p, fi, what))
	case mode&0o020 != 0:
		return fmt.Sprintf("ssh.known_hosts: %s is writable by its group (mode %04o): its members can change %s; run: chmod g-w %s",
			p, uint32(mode), what, p), nil
	}
	return "", nil
}

// secretTrust warns when a secret can be read by others than its owner: a
// literal secret in the config file at path, or one the config takes from
// ${ENV} that the environment file beside it (EnvFileName) assigns.
func (c *Config) secretTrust(path string) []string {
	var warnings []string
	if len(c.literalSecrets) > 0 {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o044 != 0 {
			warnings = append(warnings, fmt.Sprintf("%s holds a literal secret (%s) and is readable by others than its owner (mode %04o): run: chmod 600 %s, or move the secret to the unit's environment file (%s, mode 0600) and write ${NAME} in its place",
				path, strings.Join(c.literalSecrets, ", "), uint32(fi.Mode().Perm()), path, filepath.Join(c.Dir, EnvFileName)))
		}
	}
	if len(c.envSecrets) == 0 {
		return warnings
	}
	env := filepath.Join(c.Dir, EnvFileName)
	fi, err := os.Stat(env)
	if err != nil || fi.Mode().Perm()&0o044 == 0 {
		return warnings
	}
	data, err := os.ReadFile(env)
	if err != nil {
		return warnings
	}
	assigned := envAssignments(data)
	var held []string
	for _, name := range c.envSecrets {
		if assigned[name] {
			held = append(held, name)
		}
	}
	if len(held) > 0 {
		warnings = append(warnings, fmt.Sprintf("%s holds secrets (%s) and is readable by others than its owner (mode %04o): run: chmod 600 %s (systemd reads it as root)",
			env, strings.Join(held, ", "), uint32(fi.Mode().Perm()), env))
	}
	return warnings
}

// envAssignments returns the variables an environment file (systemd's
// EnvironmentFile= syntax: NAME=VALUE lines, # comments, an optional
// "export ") assigns a non-empty value.
func envAssignments(data []byte) map[string]bool {
	set := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		value = strings.Trim(strings.TrimSpace(value), `"'`)
		if value != "" {
			set[strings.TrimSpace(name)] = true
		}
	}
	return set
}

// trust checks the files that decide trust for the config read from path:
// it returns the problems that refuse it and sets c.Warnings.
func (c *Config) trust(path string) []error {
	var problems []error
	warning, problem := c.knownHostsTrust()
	if problem != nil {
		problems = append(problems, problem)
	}
	if warning != "" {
		c.Warnings = append(c.Warnings, warning)
	}
	c.Warnings = append(c.Warnings, c.secretTrust(path)...)
	return problems
}
