package bot

import (
	"fmt"

	"github.com/opsbot/opsbot/commands"
)

// RoleNone is the role of a user who may run nothing.
const RoleNone commands.Role = 0

// Auth decides who holds which role. It denies by default: a user who is not
// listed gets the default role, which is "none" unless the config says otherwise.
// Auth is immutable after creation and safe for concurrent use.
type Auth struct {
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

func roleName(r commands.Role) string {
	if r == RoleNone {
		return "none"
	}
	return r.String()
}
