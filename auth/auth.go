// Package auth decides who may do what: the roles the config grants (by
// user, by a platform's user group, by a Matrix power level), on every
// service or on some; the services a command touches (a command that may
// stop processes on shared GPUs needs its role on each service there); and
// which commands wait for a second person. It answers from memory, without
// I/O; the door (package bot) asks it and audits what it decides.
package auth

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/config"
)

// RoleNone is the role of a user who may run nothing.
const RoleNone commands.Role = 0

// Auth decides who holds which role. It denies by default: a user who is not
// listed gets the default role, which is "none" unless the config says otherwise.
// Auth is safe for concurrent use; Replace swaps its roles on a config reload.
type Auth struct {
	mu          sync.RWMutex // Replace swaps the roles under it
	defaultRole commands.Role
	users       map[string]grant        // "platform:id" -> roles by service
	scope       *Scope                  // the services, and the commands that wait for a second person
	grants      map[string][]levelGrant // platform -> roles granted by power level, highest role first
	groups      map[string]Membership   // platform -> its user groups
	levels      map[string]RoomLevels   // platform -> its users' power levels in rooms
}

// levelGrant is one role granted from a power level up.
type levelGrant struct {
	level int
	role  commands.Role
}

// RoomLevels tells a user's power level in a room (Matrix's
// m.room.power_levels), so that the roles granted to power levels
// (matrix.power_levels) apply in that room. An adapter implements it from a
// cache it keeps fresh from the rooms' state: it answers at once, without
// I/O, and is safe for concurrent use. The role decision stays in Auth.
type RoomLevels interface {
	// LevelIn returns user's power level in room, and false when the room's
	// levels are not known (then no role is granted by level there).
	LevelIn(room, user string) (int, bool)
}

// Membership tells which groups of a platform a user belongs to (Slack's
// user groups), so that roles granted to a group ("slack-group:S0123") apply
// to its members. An adapter implements it from a cache it keeps fresh: it
// answers at once, without I/O, and is safe for concurrent use. The role
// decision stays in Auth.
type Membership interface {
	// GroupsOf returns the ids of the groups user is a member of.
	GroupsOf(user string) []string
}

// New builds an Auth from role names ("none", "viewer", "operator",
// "admin"). users maps "platform:id" to a role name; a key without both parts
// ("console:", ":alice", "alice") is an error, never a user.
func New(defaultRole string, users map[string]string) (*Auth, error) {
	grants := make(map[string]config.Grant, len(users))
	for id, name := range users {
		grants[id] = config.RoleEverywhere(name)
	}
	return newAuth(defaultRole, grants)
}

// newAuth builds an Auth from role names granted per service
// (config.Grant).
func newAuth(defaultRole string, users map[string]config.Grant) (*Auth, error) {
	dr, err := parseRole(defaultRole)
	if err != nil {
		return nil, fmt.Errorf("auth default role: %w", err)
	}
	a := &Auth{defaultRole: dr, users: make(map[string]grant, len(users)), scope: &Scope{}}
	for id, g := range users {
		if !ValidKey(id) {
			return nil, fmt.Errorf("auth user %q: want platform:id, e.g. console:alice or slack:U123", id)
		}
		gr := grant{}
		for name, services := range g.Roles {
			r, err := parseRole(name)
			if err != nil {
				return nil, fmt.Errorf("auth user %s: %w", id, err)
			}
			for _, s := range services {
				gr[s] = max(gr[s], r)
			}
		}
		a.users[id] = gr
	}
	return a, nil
}

// grant is what one auth.users entry grants: a role per service,
// config.AllServices for every service.
type grant map[string]commands.Role

// on returns the role g grants on service ("": only what it grants on
// every service), and false when it grants nothing there.
func (g grant) on(service string) (commands.Role, bool) {
	r, ok := g[config.AllServices]
	if service != "" {
		if sr, found := g[service]; found && (!ok || sr > r) {
			r, ok = sr, true
		}
		// A role on a replicated service is a role on each of its replicas.
		if group := commands.GroupOf(service); group != "" {
			if sr, found := g[group]; found && (!ok || sr > r) {
				r, ok = sr, true
			}
		}
	}
	return r, ok
}

func parseRole(name string) (commands.Role, error) {
	if name == "" || name == "none" {
		return RoleNone, nil
	}
	return commands.ParseRole(name)
}

// FromConfig builds the roles cfg grants: auth.default_role and
// auth.users, and, when matrix is enabled, matrix.power_levels for platform
// "matrix" (in effect once the Matrix adapter supplies the levels, see
// WithRoomLevels).
func FromConfig(cfg *config.Config) (*Auth, error) {
	a, err := newAuth(cfg.Auth.DefaultRole, cfg.Auth.Users)
	if err != nil {
		return nil, err
	}
	a.scope = scopeFromConfig(cfg)
	if m := cfg.Matrix; m != nil && m.Enabled && len(m.PowerLevels) > 0 {
		if a, err = a.WithLevelRoles("matrix", m.PowerLevels); err != nil {
			return nil, fmt.Errorf("matrix.power_levels: %w", err)
		}
	}
	return a, nil
}

// clone returns a copy of a whose maps of platforms may be changed.
func (a *Auth) clone() *Auth {
	a.mu.RLock()
	defer a.mu.RUnlock()
	c := &Auth{defaultRole: a.defaultRole, users: a.users, scope: a.scope, grants: make(map[string][]levelGrant, len(a.grants)+1),
		groups: make(map[string]Membership, len(a.groups)+1), levels: make(map[string]RoomLevels, len(a.levels)+1)}
	for p, g := range a.grants {
		c.grants[p] = g
	}
	for p, g := range a.groups {
		c.groups[p] = g
	}
	for p, l := range a.levels {
		c.levels[p] = l
	}
	return c
}

// WithMembership returns a copy of a in which the roles granted to groups of
// platform ("PLATFORM-group:ID" keys) apply to the members m reports.
func (a *Auth) WithMembership(platform string, m Membership) *Auth {
	c := a.clone()
	c.groups[platform] = m
	return c
}

// WithLevelRoles returns a copy of a in which, on platform, a power level in
// a room grants a role in that room: roles maps role names ("viewer",
// "operator", "admin") to the least level that grants each. A higher role
// may not need a lower level than a lower role; at equal levels the higher
// role is granted. The levels come from the platform's RoomLevels
// (WithRoomLevels); without one no role is granted by level.
func (a *Auth) WithLevelRoles(platform string, roles map[string]int) (*Auth, error) {
	var grants []levelGrant
	for name, level := range roles {
		r, err := parseRole(name)
		if err != nil || r == RoleNone {
			return nil, fmt.Errorf("power level role %q: want viewer, operator or admin", name)
		}
		grants = append(grants, levelGrant{level: level, role: r})
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].role > grants[j].role })
	for i := 1; i < len(grants); i++ {
		if grants[i-1].level < grants[i].level {
			return nil, fmt.Errorf("%s at power level %d is below %s at %d: a higher role needs a level at least as high",
				grants[i-1].role, grants[i-1].level, grants[i].role, grants[i].level)
		}
	}
	c := a.clone()
	c.grants[platform] = grants
	return c, nil
}

// WithRoomLevels returns a copy of a in which the roles granted to power
// levels on platform (WithLevelRoles) apply by the levels l reports.
func (a *Auth) WithRoomLevels(platform string, l RoomLevels) *Auth {
	c := a.clone()
	c.levels[platform] = l
	return c
}

// Role returns the role of user on platform outside any room: the role their
// id and their groups grant (see RoleIn). Identity is the platform's stable
// user id (never a display name).
func (a *Auth) Role(platform, user string) commands.Role {
	return a.RoleIn(platform, "", user)
}

// RoleIn returns the role of user on platform in room. Identity is the
// platform's stable user id (never a display name). A user listed by id, a
// member of listed groups and at a power level in room that grants a role
// (matrix.power_levels) holds the highest of those roles; a user granted
// none of them holds the default role. Outside a room (room "") no power
// level counts.
func (a *Auth) RoleIn(platform, room, user string) commands.Role {
	return a.RoleOn(platform, room, user, "")
}

// RoleOn is RoleIn for a command on service: a role granted on that
// service only (auth.users' form per service) counts there besides the
// roles granted on every service. Service "" counts only the latter.
func (a *Auth) RoleOn(platform, room, user, service string) commands.Role {
	a.mu.RLock()
	defer a.mu.RUnlock()
	r, ok := a.users[platform+":"+user].on(service)
	if m := a.groups[platform]; m != nil && user != "" {
		for _, g := range m.GroupsOf(user) {
			if gr, found := a.users[platform+"-group:"+g].on(service); found && (!ok || gr > r) {
				r, ok = gr, true
			}
		}
	}
	if !ok {
		r = a.defaultRole
	}
	if lr, found := a.levelRole(platform, room, user); found && lr > r {
		r = lr
	}
	return r
}

// levelRole is the role user's power level in room grants on platform.
// a.mu is held.
func (a *Auth) levelRole(platform, room, user string) (commands.Role, bool) {
	grants, l := a.grants[platform], a.levels[platform]
	if len(grants) == 0 || l == nil || room == "" || user == "" {
		return RoleNone, false
	}
	level, known := l.LevelIn(room, user)
	if !known {
		return RoleNone, false
	}
	for _, g := range grants { // highest role first
		if level >= g.level {
			return g.role, true
		}
	}
	return RoleNone, false
}

// LevelHint tells a user refused in room how a power level there would
// grant need: "" when no level grants it on platform.
func (a *Auth) LevelHint(platform, room, user string, need commands.Role) string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if room == "" || a.levels[platform] == nil {
		return ""
	}
	least, found := 0, false
	for _, g := range a.grants[platform] {
		if g.role >= need && (!found || g.level < least) {
			least, found = g.level, true
		}
	}
	if !found {
		return ""
	}
	if level, known := a.levels[platform].LevelIn(room, user); known {
		return fmt.Sprintf("a power level of %d in this room grants it too (yours is %d)", least, level)
	}
	return fmt.Sprintf("a power level of %d in this room grants it too", least)
}

// Allowed reports whether user may run a command that needs role need,
// outside any room (see AllowedIn).
func (a *Auth) Allowed(platform, user string, need commands.Role) bool {
	return a.AllowedIn(platform, "", user, need)
}

// AllowedIn reports whether user may run a command that needs role need in
// room, by the role RoleIn gives them there.
func (a *Auth) AllowedIn(platform, room, user string, need commands.Role) bool {
	have := a.RoleIn(platform, room, user)
	return have != RoleNone && have >= need
}

// Replace makes a's roles those of b, at once for every later check (a
// config reload): the default role, the users' roles, the roles granted
// by power level, the services and the commands that wait for a second
// person. The adapters' groups and levels stay a's. Safe for concurrent
// use with Role and Allowed.
func (a *Auth) Replace(b *Auth) {
	b.mu.RLock()
	dr, users, grants, sc := b.defaultRole, b.users, b.grants, b.scope
	b.mu.RUnlock()
	a.mu.Lock()
	a.defaultRole, a.users, a.grants, a.scope = dr, users, grants, sc
	a.mu.Unlock()
}

// Scope is the scope in effect.
func (a *Auth) Scope() *Scope {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.scope
}

// RoleName names r, "none" for RoleNone.
func RoleName(r commands.Role) string {
	if r == RoleNone {
		return "none"
	}
	return r.String()
}

// ValidKey reports whether k is an auth key "platform:id" with both parts.
func ValidKey(k string) bool {
	platform, id, ok := strings.Cut(k, ":")
	return ok && platform != "" && strings.TrimSpace(id) != "" && !strings.ContainsAny(k, " \t\n")
}
