package bot

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
)

// scope is what auth decides beyond roles, from the config: where each
// service runs (so that a command that touches a node needs its role on
// every service there), and which commands wait for a second person.
type scope struct {
	services   map[string]spot
	twoPerson  []config.CommandRule
	unattended []config.CommandRule
	approveTTL time.Duration
}

// spot is where a service runs: its physical node (the Proxmox node of a
// container, else its host), its host and its GPUs (nil: every GPU there).
type spot struct {
	node, host string
	gpus       []int
}

func scopeFromConfig(cfg *config.Config) *scope {
	s := &scope{services: make(map[string]spot, len(cfg.Services)), approveTTL: cfg.Auth.TwoPerson.Expires.D()}
	for name, svc := range cfg.Services {
		node := svc.Host
		if svc.Proxmox != nil {
			node = svc.Proxmox.Node
		}
		s.services[name] = spot{node: node, host: svc.Host, gpus: svc.GPUs}
	}
	s.twoPerson, s.unattended = cfg.Auth.TwoPerson.Rules()
	if s.approveTTL <= 0 {
		s.approveTTL = config.DefaultApprovalTTL
	}
	return s
}

// touched returns the services cmd needs its role on: the service it names;
// for a command that may reap on its node (Policy.Reaps), also every
// service on that node whose GPUs could be the same; for a command on a
// host, every service there. Nil: the command is about no service, and the
// role granted on every service counts.
func (s *scope) touched(cmd commands.Command) []string {
	on := commands.Where(cmd)
	switch {
	case on.Service != "" && cmd.Spec().Reaps && commands.Mutates(cmd):
		me, ok := s.services[on.Service]
		out := []string{on.Service}
		for name, o := range s.services {
			if ok && name != on.Service && o.node == me.node && sharesGPU(me.gpus, o.gpus) {
				out = append(out, name)
			}
		}
		sort.Strings(out[1:])
		return out
	case on.Service != "":
		return []string{on.Service}
	case on.Host != "":
		var out []string
		for name, o := range s.services {
			if o.host == on.Host || o.node == on.Host {
				out = append(out, name)
			}
		}
		sort.Strings(out)
		return out
	}
	return nil
}

// sharesGPU reports whether GPU lists a and b (nil: every GPU) overlap.
func sharesGPU(a, b []int) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, g := range a {
		if slices.Contains(b, g) {
			return true
		}
	}
	return false
}

// needsApproval reports whether cmd waits for a second person: it changes
// something and auth.two_person.commands lists it.
func (s *scope) needsApproval(cmd commands.Command) bool {
	return commands.Mutates(cmd) && matchRule(s.twoPerson, cmd)
}

// unattendedOK reports whether the scheduler and the watchdog may run cmd,
// which needs an approval, without one (auth.two_person.unattended).
func (s *scope) unattendedOK(cmd commands.Command) bool { return matchRule(s.unattended, cmd) }

func matchRule(rules []config.CommandRule, cmd commands.Command) bool {
	path, svc := cmd.Spec().Path, commands.Where(cmd).Service
	for _, r := range rules {
		if r.Matches(path, svc) {
			return true
		}
	}
	return false
}

// permit is auth's answer for one command: whether it may run, and what a
// refusal says.
type permit struct {
	ok       bool
	need     commands.Role
	have     commands.Role // the lowest role held among the services touched
	services []string      // the services touched (nil: every service)
	lacking  []string      // those of services where the role is lacking
}

// Permit decides whether user may run cmd in room: the role cmd needs on
// every service it touches (touched), or, for a command about no service,
// the role granted on every service.
func (a *Auth) Permit(platform, room, user string, cmd commands.Command) permit {
	need := commands.RoleOf(cmd)
	services := a.scopeNow().touched(cmd)
	p := permit{need: need, services: services}
	if len(services) == 0 {
		p.have = a.RoleIn(platform, room, user)
		p.ok = p.have != RoleNone && p.have >= need
		return p
	}
	p.have = commands.Admin
	for _, s := range services {
		r := a.RoleOn(platform, room, user, s)
		p.have = min(p.have, r)
		if r == RoleNone || r < need {
			p.lacking = append(p.lacking, s)
		}
	}
	p.ok = len(p.lacking) == 0
	return p
}

// mayChange lists the services on which user holds at least need.
func (a *Auth) mayChange(platform, room, user string, need commands.Role) []string {
	var out []string
	for name := range a.scopeNow().services {
		if r := a.RoleOn(platform, room, user, name); r != RoleNone && r >= need {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// refusal says why p refused cmd to user, and what they may do instead.
func (a *Auth) refusal(platform, room, user string, cmd commands.Command, p permit) string {
	text := commands.Text(cmd)
	if len(p.services) == 0 || !a.scoped(platform, user) {
		return fmt.Sprintf("`%s` needs the %s role; you have %s. Ask an admin to grant it in the config (auth.users[\"%s:%s\"]).",
			text, p.need, roleName(p.have), platform, user)
	}
	var b strings.Builder
	on := commands.Where(cmd).Service
	if len(p.services) > 1 && on != "" {
		fmt.Fprintf(&b, "`%s` may stop processes on GPUs that %s shares with %s, so it needs the %s role on each of %s; you lack it on %s.",
			text, on, strings.Join(others(p.services, on), ", "), p.need, strings.Join(p.services, ", "), strings.Join(p.lacking, ", "))
	} else {
		fmt.Fprintf(&b, "`%s` needs the %s role on %s; you have %s there.", text, p.need, strings.Join(p.lacking, ", "),
			roleName(a.RoleOn(platform, room, user, p.lacking[0])))
	}
	if may := a.mayChange(platform, room, user, p.need); len(may) > 0 {
		fmt.Fprintf(&b, " You may change: %s.", strings.Join(may, ", "))
	} else {
		fmt.Fprintf(&b, " You may change no service with the %s role.", p.need)
	}
	fmt.Fprintf(&b, " Ask an admin to grant it in the config (auth.users[\"%s:%s\"]).", platform, user)
	return b.String()
}

func others(list []string, but string) []string {
	var out []string
	for _, s := range list {
		if s != but {
			out = append(out, s)
		}
	}
	return out
}

// scoped reports whether user holds a role granted on some services only
// (by their id or a group): only then does a refusal name services.
func (a *Auth) scoped(platform, user string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	keys := []string{platform + ":" + user}
	if m := a.groups[platform]; m != nil && user != "" {
		for _, g := range m.GroupsOf(user) {
			keys = append(keys, platform+"-group:"+g)
		}
	}
	for _, k := range keys {
		for svc := range a.users[k] {
			if svc != config.AllServices {
				return true
			}
		}
	}
	return false
}
