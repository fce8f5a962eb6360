package bot

import (
	"fmt"
	"sync"

	"github.com/opsbot/opsbot/commands"
)

// RoleNone is the role of a user who may run nothing.
const RoleNone commands.Role = 0

// Auth decides who holds which role. It denies by default: a user who is not
// listed gets the default role, which is "none" unless the config says otherwise.
// Auth is safe for concurrent use; Replace swaps its roles on a config reload.
type Auth struct {
	mu          sync.RWMutex // Replace swaps the roles under it
	defaultRole commands.Role
	users       map[string]commands.Role // "platform:id" -> role
}

// NewAuth builds an Auth from role names ("none", "viewer", "operator",
// "admin"). users maps "platform:id" to a role name; a key without both parts
// ("console:", ":alice", "alice") is an error, never a user.
func NewAuth(defaultRole string, users map[string]string) (*Auth, error) {
	dr, err := parseRole(defaultRole)
	if err != nil {
		return nil, fmt.Errorf("auth default role: %w", err)
	}
	a := &Auth{defaultRole: dr, users: make(map[string]commands.Role, len(users))}
	for id, name := range users {
		if !validKey(id) {
			return nil, fmt.Errorf("auth user %q: want platform:id, e.g. console:alice or slack:U123", id)
		}
		r, err := parseRole(name)
		if err != nil {
			return nil, fmt.Errorf("auth user %s: %w", id, err)
		}
		a.users[id] = r
	}
	return a, nil
}

func parseRole(name string) (commands.Role, error) {
	if name == "" || name == "none" {
		return RoleNone, nil
	}
	return commands.ParseRole(name)
}

// Role returns the role of user on platform. Identity is the platform's stable
// user id (never a display name).
func (a *Auth) Role(platform, user string) commands.Role {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if r, ok := a.users[platform+":"+user]; ok {
		return r
	}
	return a.defaultRole
}

// Allowed reports whether user may run a command that needs role need.
func (a *Auth) Allowed(platform, user string, need commands.Role) bool {
	have := a.Role(platform, user)
	return have != RoleNone && have >= need
}

// Replace makes a's roles those of b, at once for every later check (a
// config reload). Safe for concurrent use with Role and Allowed.
func (a *Auth) Replace(b *Auth) {
	b.mu.RLock()
	dr, users := b.defaultRole, b.users
	b.mu.RUnlock()
	a.mu.Lock()
	a.defaultRole, a.users = dr, users
	a.mu.Unlock()
}

func roleName(r commands.Role) string {
	if r == RoleNone {
		return "none"
	}
	return r.String()
}
