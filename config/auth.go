package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opsbot/opsbot/commands"
)

// Auth maps platform user ids to roles. Keys of Users are "platform:id", e.g.
// "slack:U024BE7LH", "matrix:@alice:example.org", "console:alice", or
// "slack-group:S0123" for the members of a Slack user group.
type Auth struct {
	// DefaultRole is the role of users not listed: "none" (default), "viewer",
	// "operator" or "admin".
	DefaultRole string           `yaml:"default_role,omitempty"`
	Users       map[string]Grant `yaml:"users,omitempty"`
	// TwoPerson lists the commands that wait for a second person's approval.
	TwoPerson TwoPerson `yaml:"two_person,omitempty"`
}

// AllServices is the service name of a grant on every service.
const AllServices = "*"

// Grant is what one auth.users entry grants: one role on every service
// (the plain form, `operator`), or roles per service (`{operator: [qwen],
// viewer: "*"}`: operator on qwen, viewer on every service).
type Grant struct {
	// Roles maps a role name to the services it is granted on; AllServices
	// is every service, and commands about no service (help, jobs,
	// schedules) count only what is granted there.
	Roles map[string][]string
}

// RoleEverywhere is the plain form: role on every service.
func RoleEverywhere(role string) Grant {
	return Grant{Roles: map[string][]string{role: {AllServices}}}
}

// Plain reports the role of a grant in the plain form, and false for a
// grant per service.
func (g Grant) Plain() (string, bool) {
	if len(g.Roles) != 1 {
		return "", false
	}
	for r, s := range g.Roles {
		return r, len(s) == 1 && s[0] == AllServices
	}
	return "", false
}

// UnmarshalYAML reads a role name or a mapping of role names to a service,
// "*" or a list of services. checkShape has checked the shape.
func (g *Grant) UnmarshalYAML(n *yaml.Node) error {
	g.Roles = map[string][]string{}
	if n.Kind == yaml.ScalarNode {
		g.Roles[n.Value] = []string{AllServices}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a role, or a mapping of roles to services", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var services []string
		switch v.Kind {
		case yaml.ScalarNode:
			services = []string{v.Value}
		case yaml.SequenceNode:
			for _, s := range v.Content {
				services = append(services, s.Value)
			}
		default:
			return fmt.Errorf("line %d: want a service, \"*\" or a list of services", v.Line)
		}
		g.Roles[k.Value] = services
	}
	return nil
}

// MarshalYAML writes the plain form where it is one.
func (g Grant) MarshalYAML() (any, error) {
	if r, ok := g.Plain(); ok {
		return r, nil
	}
	return g.Roles, nil
}

// grant is checkShape's check of a Grant: a string, or a mapping of
// strings to a string or a list of strings.
func (w *shapeWalk) grant(at shapeAt) bool {
	n := at.n
	ok := n.Kind == yaml.ScalarNode
	if n.Kind == yaml.MappingNode {
		ok = true
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ok = ok && k.Kind == yaml.ScalarNode && (v.Kind == yaml.ScalarNode || v.Kind == yaml.SequenceNode)
			for _, s := range v.Content {
				ok = ok && s.Kind == yaml.ScalarNode
			}
		}
	}
	if !ok {
		w.errs = append(w.errs, fmt.Errorf("%s: expected a role (viewer, operator, admin), or a mapping of roles to services "+
			"like {operator: [qwen], viewer: \"*\"}, got %s (line %d)", at.path, kindWord(n), n.Line))
	}
	return ok
}

// TwoPerson is auth.two_person: the commands that, after their own
// confirmation, wait until a different person with a role that may run
// them approves them.
type TwoPerson struct {
	// Commands are command paths, each optionally followed by one service
	// ("gpu recover", "svc stop qwen"): a run of it (not a dry run), on any
	// service or on that one, waits for an approval.
	Commands []string `yaml:"commands,omitempty"`
	// Expires is how long an approval is waited for (default
	// DefaultApprovalTTL); the request is dropped after it.
	Expires Duration `yaml:"expires,omitempty"`
	// Unattended are entries of Commands that the scheduler and the
	// watchdog may run without an approval; their runs of the others are
	// skipped, saying so.
	Unattended []string `yaml:"unattended,omitempty"`
}

// CommandRule is one entry of auth.two_person.commands: a command path and
// the service it is limited to ("" for any).
type CommandRule struct{ Path, Service string }

// Matches reports whether the rule covers a command of path on service: a
// rule on a replicated service covers each of its replicas.
func (r CommandRule) Matches(path, service string) bool {
	return r.Path == path && (r.Service == "" || r.Service == service || r.Service == commands.GroupOf(service))
}

// Rules are Commands and Unattended parsed (Validate has checked them; an
// entry that does not parse is left out).
func (t TwoPerson) Rules() (commands, unattended []CommandRule) {
	for _, s := range t.Commands {
		if r, err := parseRule(s, nil); err == nil {
			commands = append(commands, r)
		}
	}
	for _, s := range t.Unattended {
		if r, err := parseRule(s, nil); err == nil {
			unattended = append(unattended, r)
		}
	}
	return commands, unattended
}

// parseRule reads "PATH [SERVICE]"; services, when not nil, are the
// configured services the SERVICE must be one of.
func parseRule(s string, services []string) (CommandRule, error) {
	words := strings.Fields(s)
	var spec *commands.Spec
	n := 0
	for i := min(2, len(words)); i > 0 && spec == nil; i-- {
		if spec = commands.Lookup(strings.Join(words[:i], " ")); spec != nil {
			n = i
		}
	}
	if spec == nil {
		var paths []string
		for _, sp := range commands.Specs() {
			paths = append(paths, sp.Path)
		}
		msg := fmt.Sprintf("%q is not a command", s)
		if m := commands.Closest(strings.Join(words[:min(2, len(words))], " "), paths); m != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", m)
		}
		return CommandRule{}, fmt.Errorf("%s", msg)
	}
	r := CommandRule{Path: spec.Path}
	switch rest := words[n:]; {
	case len(rest) > 1:
		return r, fmt.Errorf("%q: write a command and at most one service, like \"svc stop qwen\"", s)
	case len(rest) == 1:
		r.Service = rest[0]
		if services != nil && !slices.Contains(services, r.Service) {
			return r, unknownService(r.Service, services)
		}
	}
	if !spec.Mutating {
		return r, fmt.Errorf("%q changes nothing: only commands that change something wait for an approval", s)
	}
	return r, nil
}

func unknownService(name string, services []string) error {
	msg := fmt.Sprintf("unknown service %q", name)
	if m := commands.Closest(name, services); m != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", m)
	}
	return fmt.Errorf("%s; the services are %s", msg, strings.Join(services, ", "))
}

// validateAuth checks auth: known roles, keys of the form platform:id,
// services that exist, and auth.two_person.
func (c *Config) validateAuth(bad func(string, ...any)) {
	if !knownRole(c.Auth.DefaultRole) {
		bad("auth.default_role must be one of %s, got %q", strings.Join(Roles, ", "), c.Auth.DefaultRole)
	}
	services := c.NamedServices()
	for _, id := range sortedKeys(c.Auth.Users) {
		if p, _, ok := strings.Cut(id, ":"); !ok || (p != "slack" && p != "slack-group" && p != "matrix" && p != "console") {
			bad("auth.users[%q]: keys are platform:id with platform slack, slack-group (a user group id), matrix or console", id)
		}
		g := c.Auth.Users[id]
		if role, ok := g.Plain(); ok {
			if !knownRole(role) {
				bad("auth.users[%q]: unknown role %q (one of %s)", id, role, strings.Join(Roles, ", "))
			}
			continue
		}
		roles := make([]string, 0, len(g.Roles))
		for r := range g.Roles {
			roles = append(roles, r)
		}
		sort.Strings(roles)
		for _, role := range roles {
			key := fmt.Sprintf("auth.users[%q].%s", id, role)
			if !knownRole(role) || role == "none" {
				bad("auth.users[%q]: unknown role %q (one of viewer, operator, admin)", id, role)
				continue
			}
			svcs := g.Roles[role]
			if len(svcs) == 0 {
				bad("%s: name the services it is granted on, or \"*\" for every service", key)
			}
			for _, s := range svcs {
				switch {
				case s == AllServices && len(svcs) > 1:
					bad("%s: \"*\" is every service: write it alone, not in a list", key)
				case s != AllServices && !slices.Contains(services, s):
					bad("%s: %v", key, unknownService(s, services))
				}
			}
		}
	}
	c.validateTwoPerson(services, bad)
}

// validateTwoPerson checks auth.two_person.
func (c *Config) validateTwoPerson(services []string, bad func(string, ...any)) {
	t := c.Auth.TwoPerson
	var rules []CommandRule
	for i, s := range t.Commands {
		r, err := parseRule(s, services)
		if err != nil {
			bad("auth.two_person.commands[%d]: %v", i, err)
			continue
		}
		rules = append(rules, r)
	}
	for i, s := range t.Unattended {
		r, err := parseRule(s, services)
		if err != nil {
			bad("auth.two_person.unattended[%d]: %v", i, err)
			continue
		}
		covered := false
		for _, c := range rules {
			covered = covered || (c.Path == r.Path && (c.Service == "" || c.Service == r.Service))
		}
		if !covered {
			bad("auth.two_person.unattended[%d]: %q is not in auth.two_person.commands, so it needs no approval anyway", i, s)
		}
	}
	if d := t.Expires.D(); d < 0 || (d != 0 && d < 10*time.Second) {
		bad("auth.two_person.expires: %s is too short (at least 10s)", d)
	}
}
