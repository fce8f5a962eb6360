package commands

import (
	"fmt"
	"strings"
)

// Resolving service and host names against the configuration.

// isService reports whether w is a configured service or a replicated
// service, exactly.
func (p *parser) isService(w string) bool {
	for _, s := range p.opts.Services {
		if s.Name == w || (s.Group != "" && s.Group == w) {
			return true
		}
	}
	return false
}

// serviceNames lists the configured services, in config order, each
// replicated service before its replicas.
func (p *parser) serviceNames() []string {
	names := make([]string, 0, len(p.opts.Services))
	for _, s := range p.opts.Services {
		if s.Group != "" && (len(names) == 0 || GroupOf(names[len(names)-1]) != s.Group) {
			names = append(names, s.Group)
		}
		names = append(names, s.Name)
	}
	return names
}

// findService returns the service named w (case-insensitively), or nil.
func (p *parser) findService(w string) *ServiceRef {
	for i := range p.opts.Services {
		if strings.EqualFold(p.opts.Services[i].Name, w) {
			return &p.opts.Services[i]
		}
	}
	return nil
}

// knownHosts lists Hosts and then the service hosts not among them.
func (p *parser) knownHosts() []string {
	out := append([]string(nil), p.opts.Hosts...)
	for _, s := range p.opts.Services {
		dup := false
		for _, h := range out {
			dup = dup || h == s.Host
		}
		if !dup {
			out = append(out, s.Host)
		}
	}
	return out
}

// findHost returns the host named w (case-insensitively), or "".
func (p *parser) findHost(w string) string {
	for _, h := range p.opts.Hosts {
		if strings.EqualFold(h, w) {
			return h
		}
	}
	for _, s := range p.opts.Services {
		if strings.EqualFold(s.Host, w) {
			return s.Host
		}
	}
	return ""
}

// badName checks w against the name grammar: a name, or GROUP@REPLICA.
func badName(w, what string) string {
	if ValidServiceName(strings.ToLower(w)) {
		return ""
	}
	g, r, replica := strings.Cut(w, "@")
	switch {
	case len(g) > MaxNameLen || (replica && len(r) > MaxNameLen):
		return fmt.Sprintf("%s name is too long (at most %d characters)", what, MaxNameLen)
	case replica:
		return fmt.Sprintf("%s is not a replica's name (SERVICE@REPLICA, each letters, digits, . _ -)", quote(w))
	}
	return fmt.Sprintf("%s is not a %s name (letters, digits, . _ -)", quote(w), what)
}

// unknownService says w is no service, suggesting the closest.
func (p *parser) unknownService(w string, toks []token, i int) (string, string) {
	names := p.serviceNames()
	sugg := ""
	if m := closest(w, names); m != "" {
		sugg = didYouMean(replaceWord(toks, i, m))
	}
	if len(names) == 0 {
		return fmt.Sprintf("unknown service %s: no services are configured", quote(w)), sugg
	}
	return fmt.Sprintf("unknown service %s: the services are %s", quote(w), strings.Join(names, ", ")), sugg
}

// defaultHost: the only GPU host (service host), else "" for all of them.
func (p *parser) defaultHost() string {
	var h string
	for _, s := range p.opts.Services {
		if h == "" {
			h = s.Host
		} else if h != s.Host {
			return ""
		}
	}
	if h == "" && len(p.opts.Hosts) == 1 {
		h = p.opts.Hosts[0]
	}
	return h
}
