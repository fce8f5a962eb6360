package config

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// AdaptiveRoot is the directory every service's adaptive config may lie
// under; services.NAME.adaptive_dir names one more for its service.
const AdaptiveRoot = "/etc/sglang"

// systemTrees are the directories services.NAME.adaptive_dir may neither be
// nor lie under: the system's programs, libraries, configuration, devices,
// kernel state and run-time state (AdaptiveRoot, under /etc, is the one
// exception: it is where adaptive configs go by default).
var systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
	"/proc", "/run", "/sbin", "/sys", "/usr", "/var/lock", "/var/run", "/var/spool"}

// unitTrees are where systemd reads units from: an adaptive config there
// would sit among them.
var unitTrees = []string{"/etc/systemd", "/run/systemd", "/lib/systemd", "/usr/lib/systemd"}

// validateAdaptive checks services.NAME.adaptive_dir and adaptive_config:
// the file a per-load change writes on the service's host stays in its
// place (adaptiveDirProblem, adaptiveConfigProblem).
func (c *Config) validateAdaptive(name string, s Service, bad func(string, ...any)) {
	if msg := adaptiveDirProblem(name, s.AdaptiveDir); msg != "" {
		bad("%s", msg)
	}
	if msg := c.adaptiveConfigProblem(name, s); msg != "" {
		bad("%s", msg)
	}
}

// adaptiveDirProblem says why dir cannot be services.NAME.adaptive_dir, or
// "": an absolute, clean path of at least two components, none hidden,
// outside the systemTrees (but for AdaptiveRoot and below).
func adaptiveDirProblem(name, dir string) string {
	key := fmt.Sprintf("services.%s.adaptive_dir", name)
	switch {
	case dir == "":
		return ""
	case !plainAbsPath(dir):
		return fmt.Sprintf("%s must be an absolute path of letters, digits and /._-+@ only, got %q", key, dir)
	case path.Clean(dir) != dir:
		return fmt.Sprintf("%s %q must be a plain directory path: no '.' or '..' components, no repeated or trailing '/' (write %q)", key, dir, path.Clean(dir))
	case strings.Count(dir, "/") < 2:
		return fmt.Sprintf("%s %q is a top-level directory: name a directory of its own for adaptive configs, such as /srv/sglang or /var/lib/sglang", key, dir)
	case hiddenPart(dir) != "":
		return fmt.Sprintf("%s %q has a hidden component (%s): name a directory of its own for adaptive configs, such as /srv/sglang", key, dir, hiddenPart(dir))
	case within(dir, AdaptiveRoot):
		return ""
	}
	for _, tree := range systemTrees {
		if within(dir, tree) {
			return fmt.Sprintf("%s %q lies in %s, a system directory: adaptive configs go under %s/ or a directory of their own, such as /srv/sglang", key, dir, tree, AdaptiveRoot)
		}
	}
	return ""
}

// adaptiveConfigProblem says why the service's adaptive_config cannot be
// written, or "": a plain absolute path to a .json file strictly under
// AdaptiveRoot or the service's adaptive_dir, not a systemd unit's path nor
// any other path the config names.
func (c *Config) adaptiveConfigProblem(name string, s Service) string {
	p, key := s.AdaptiveConfig, fmt.Sprintf("services.%s.adaptive_config", name)
	roots := adaptiveRoots(s)
	switch {
	case p == "":
		return ""
	case !plainAbsPath(p):
		return fmt.Sprintf("%s must be an absolute path of letters, digits and /._-+@ only (it goes into the unit's command line unquoted), got %q", key, p)
	case strings.HasSuffix(p, "/") || path.Base(p) == "." || path.Base(p) == ".." || slices.Contains(roots, p):
		return fmt.Sprintf("%s %q names a directory: name the file in it, such as %s", key, p, AdaptiveConfigDefault(name))
	case path.Clean(p) != p:
		return fmt.Sprintf("%s %q must be a plain file path: no '.' or '..' components, no repeated '/' (write %q)", key, p, path.Clean(p))
	case c.unitOf(p) != "":
		return fmt.Sprintf("%s %q is %s: the adaptive config is a JSON file of its own, and writing it there would replace the unit; use %s", key, p, c.unitOf(p), AdaptiveConfigDefault(name))
	case !underAny(p, roots):
		return fmt.Sprintf("%s %q is outside the directories an adaptive config may be written to (%s): put it there, such as %s, or name its directory in services.%s.adaptive_dir",
			key, p, strings.Join(withSlash(roots), " and "), AdaptiveConfigDefault(name), name)
	case !strings.HasSuffix(p, ".json") || path.Base(p) == ".json":
		return fmt.Sprintf("%s %q must name a .json file (SGLang reads it as JSON), such as %s", key, p, AdaptiveConfigDefault(name))
	}
	if other := c.otherPathNamed(name, p); other != "" {
		return fmt.Sprintf("%s %q is also %s: each file has one use, so give this service's adaptive config a path of its own, such as %s", key, p, other, AdaptiveConfigDefault(name))
	}
	return ""
}

// unitOf names the systemd unit path p would be ("the unit file of
// services.X.unit NAME", "in a unit's drop-in directory", "in systemd's
// unit directories"), or "".
func (c *Config) unitOf(p string) string {
	for _, in := range c.Instances() {
		if u := in.Service.Unit; u != "" && path.Base(p) == u {
			if in.Group != "" {
				return fmt.Sprintf("the path of a unit file (%s's unit %s)", in.Name, u)
			}
			return fmt.Sprintf("the path of a unit file (services.%s.unit %s)", in.Name, u)
		}
	}
	for _, part := range strings.Split(p, "/") {
		if strings.HasSuffix(part, ".service.d") {
			return "in a unit's drop-in directory (" + part + ")"
		}
	}
	for _, tree := range unitTrees {
		if within(p, tree) {
			return "in " + tree + "/, where systemd reads units"
		}
	}
	return ""
}

// otherPathNamed names the key of another path the config names that is p:
// another service's adaptive config (reported once per pair when both are
// set), the store's file, the SSH key or known_hosts; "" when none is.
func (c *Config) otherPathNamed(name, p string) string {
	for _, o := range sortedKeys(c.Services) {
		other := c.Services[o]
		if o == name || other.AdaptiveConfigPath(o) != p {
			continue
		}
		if other.AdaptiveConfig == "" {
			return fmt.Sprintf("services.%s's adaptive config (its default)", o)
		}
		if o < name {
			return fmt.Sprintf("services.%s.adaptive_config", o)
		}
	}
	others := []struct{ key, path string }{{"store.path", c.Store.Path}, {"ssh.key_file", c.SSH.KeyFile}, {"ssh.known_hosts", c.SSH.KnownHosts}}
	for _, o := range others {
		if o.path != "" && c.Path(o.path) == p {
			return o.key
		}
	}
	return ""
}

// adaptiveRoots are the directories s's adaptive config may lie under.
func adaptiveRoots(s Service) []string {
	if s.AdaptiveDir != "" && s.AdaptiveDir != AdaptiveRoot {
		return []string{AdaptiveRoot, s.AdaptiveDir}
	}
	return []string{AdaptiveRoot}
}

// within reports whether p is dir or lies under it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// underAny reports whether p lies strictly under one of dirs.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// hiddenPart is p's first component that starts with a dot, or "".
func hiddenPart(p string) string {
	for _, part := range strings.Split(p, "/") {
		if strings.HasPrefix(part, ".") {
			return part
		}
	}
	return ""
}

func withSlash(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = d + "/"
	}
	return out
}

// plainAbsPath: an absolute path of characters that need no quoting in a
// unit or a shell (its components are checked on their own).
func plainAbsPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@", r)) {
			return false
		}
	}
	return true
}
