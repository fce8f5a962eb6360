package auth

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
)

// Scope is what auth decides beyond roles, from the config: where each
// service runs (so that a command that touches a node needs its role on
// every service there), and which commands wait for a second person.
type Scope struct {
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

func scopeFromConfig(cfg *config.Config) *Scope {
	ins := cfg.Instances()
	s := &Scope{services: make(map[string]spot, len(ins)), approveTTL: cfg.Auth.TwoPerson.Expires.D()}
	for _, in := range ins {
		s.services[in.Name] = spot{node: in.Node(), host: in.Service.Host, gpus: in.Service.GPUs}
	}
	s.twoPerson, s.unattended = cfg.Auth.TwoPerson.Rules()
	if s.approveTTL <= 0 {
		s.approveTTL = config.DefaultApprovalTTL
	}
	return s
}

// Touched returns the services cmd needs its role on: the service it names
// (each replica, for a replicated service); for a command that may reap on
// its node (Policy.Reaps), also every service on that node whose GPUs
// could be the same; for a command on a host, every service there. Nil:
// the command is about no service, and the role granted on every service
// counts.
func (s *Scope) Touched(cmd commands.Command) []string {
	on := commands.Where(cmd)
	if len(on.Replicas) > 0 {
		// A replicated service: each replica, and what each touches.
		var out []string
		for _, r := range on.Replicas {
			for _, t := range s.touchedOn(cmd, commands.On{Service: r}) {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	return s.touchedOn(cmd, on)
}

// touchedOn is Touched for cmd acting on on (one service, or a host).
func (s *Scope) touchedOn(cmd commands.Command, on commands.On) []string {
	switch {
	case on.Service != "" && cmd.Spec().Reaps && commands.Mutates(cmd):
		me, ok := s.services[on.Service]
		out := []string{on.Service}
		for name, o := range s.services {
			if ok && name != on.Service && o.node == me.node && config.GPUsOverlap(me.gpus, o.gpus) {
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

// NeedsApproval reports whether cmd waits for a second person: it changes
// something and auth.two_person.commands lists it.
func (s *Scope) NeedsApproval(cmd commands.Command) bool {
	return commands.Mutates(cmd) && matchRule(s.twoPerson, cmd)
}

// unattendedOK reports whether the scheduler and the watchdog may run cmd,
// which needs an approval, without one (auth.two_person.unattended).
func (s *Scope) UnattendedOK(cmd commands.Command) bool { return matchRule(s.unattended, cmd) }

func matchRule(rules []config.CommandRule, cmd commands.Command) bool {
	path, svc := cmd.Spec().Path, commands.Where(cmd).Service
	for _, r := range rules {
		if r.Matches(path, svc) {
			return true
		}
	}
	return false
}

// Decision is auth's answer for one command: whether it may run, and what a
// refusal says.
type Decision struct {
	OK       bool
	Need     commands.Role
	Have     commands.Role // the lowest role held among the services touched
	Services []string      // the services touched (nil: every service)
	Lacking  []string      // those of services where the role is lacking
}

// Permit decides whether user may run cmd in room: the role cmd needs on
// every service it touches (touched), or, for a command about no service,
// the role granted on every service.
func (a *Auth) Permit(platform, room, user string, cmd commands.Command) Decision {
	need := commands.RoleOf(cmd)
	services := a.Scope().Touched(cmd)
	p := Decision{Need: need, Services: services}
	if len(services) == 0 {
		p.Have = a.RoleIn(platform, room, user)
		p.OK = p.Have != RoleNone && p.Have >= need
		return p
	}
	p.Have = commands.Admin
	for _, s := range services {
		r := a.RoleOn(platform, room, user, s)
		p.Have = min(p.Have, r)
		if r == RoleNone || r < need {
			p.Lacking = append(p.Lacking, s)
		}
	}
	p.OK = len(p.Lacking) == 0
	return p
}

// mayChange lists the services on which user holds at least need.
func (a *Auth) mayChange(platform, room, user string, need commands.Role) []string {
	var out []string
	for name := range a.Scope().services {
		if r := a.RoleOn(platform, room, user, name); r != RoleNone && r >= need {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Refusal says why p refused cmd to user, and what they may do instead.
func (a *Auth) Refusal(platform, room, user string, cmd commands.Command, p Decision) string {
	text := commands.Text(cmd)
	if len(p.Services) == 0 || !a.Scoped(platform, user) {
		return fmt.Sprintf("`%s` needs the %s role; you have %s. Ask an admin to grant it in the config (auth.users[\"%s:%s\"]).",
			text, p.Need, RoleName(p.Have), platform, user)
	}
	var b strings.Builder
	where := commands.Where(cmd)
	on := where.Service
	switch {
	case len(where.Replicas) > 0:
		fmt.Fprintf(&b, "`%s` acts on each replica of %s, so it needs the %s role on each of %s; you lack it on %s.",
			text, on, p.Need, strings.Join(p.Services, ", "), strings.Join(p.Lacking, ", "))
	case len(p.Services) > 1 && on != "":
		fmt.Fprintf(&b, "`%s` may stop processes on GPUs that %s shares with %s, so it needs the %s role on each of %s; you lack it on %s.",
			text, on, strings.Join(others(p.Services, on), ", "), p.Need, strings.Join(p.Services, ", "), strings.Join(p.Lacking, ", "))
	default:
		fmt.Fprintf(&b, "`%s` needs the %s role on %s; you have %s there.", text, p.Need, strings.Join(p.Lacking, ", "),
			RoleName(a.RoleOn(platform, room, user, p.Lacking[0])))
	}
	if may := a.mayChange(platform, room, user, p.Need); len(may) > 0 {
		fmt.Fprintf(&b, " You may change: %s.", strings.Join(may, ", "))
	} else {
		fmt.Fprintf(&b, " You may change no service with the %s role.", p.Need)
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

// Scoped reports whether user holds a role granted on some services only
// (by their id or a group): only then does a refusal name services.
func (a *Auth) Scoped(platform, user string) bool {
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

// ApproveTTL is how long a request waits for its second person.
func (s *Scope) ApproveTTL() time.Duration { return s.approveTTL }

// Approvers lists the config's user and group keys that hold the role cmd
// needs on every service it touches, leaving out those in but (the
// requester, and whoever they act as): whom a request for approval may
// name. Groups read "a member of KEY". It also returns the services
// touched (nil: the command is about no service).
func (a *Auth) Approvers(cmd commands.Command, but ...string) (named, services []string) {
	need := commands.RoleOf(cmd)
	services = a.Scope().Touched(cmd)
	check := services
	if len(check) == 0 {
		check = []string{""}
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	for key, g := range a.users {
		if slices.Contains(but, key) {
			continue
		}
		ok := true
		for _, s := range check {
			r, found := g.on(s)
			ok = ok && found && r >= need
		}
		if !ok {
			continue
		}
		if p, _, _ := strings.Cut(key, ":"); strings.HasSuffix(p, "-group") {
			named = append(named, "a member of "+key)
		} else {
			named = append(named, key)
		}
	}
	sort.Strings(named)
	return named, services
}
