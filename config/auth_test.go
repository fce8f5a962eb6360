package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// twoServices is minimal with a second service, coder, on the same node.
var twoServices = strings.Replace(minimal, "services:\n", "services:\n  coder: {host: gpu1, unit: vllm-coder.service, url: \"http://127.0.0.1:30001\", engine: vllm}\n", 1)

// TestAuthGrantsPerService: auth.users takes a role (every service) or a
// mapping of roles to services, and renders each back as written.
func TestAuthGrantsPerService(t *testing.T) {
	text := strings.Replace(twoServices, `users: {"console:alice": admin}`,
		`users: {"console:alice": admin, "slack:UALICE": {operator: [qwen], viewer: "*"}, "slack-group:S1": {admin: coder}}`, 1)
	c, err := Parse([]byte(text), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Grant{
		"console:alice":  RoleEverywhere("admin"),
		"slack:UALICE":   {Roles: map[string][]string{"operator": {"qwen"}, "viewer": {"*"}}},
		"slack-group:S1": {Roles: map[string][]string{"admin": {"coder"}}},
	}
	if !reflect.DeepEqual(c.Auth.Users, want) {
		t.Fatalf("users %+v, want %+v", c.Auth.Users, want)
	}
	out, err := c.Redacted()
	if err != nil || !strings.Contains(string(out), "console:alice: admin") || !strings.Contains(string(out), "- qwen") {
		t.Fatalf("redacted: %v\n%s", err, out)
	}
	if c.Auth.TwoPerson.Expires.D() != DefaultApprovalTTL {
		t.Errorf("two_person.expires %s, want the default %s", c.Auth.TwoPerson.Expires.D(), DefaultApprovalTTL)
	}
}

// TestTwoPersonConfig: auth.two_person's commands and unattended parse to
// rules; each mistake is named by its key, with a did-you-mean.
func TestTwoPersonConfig(t *testing.T) {
	good := twoServices + "  two_person: {commands: [gpu recover, svc stop qwen, mtp per-load], unattended: [gpu recover], expires: 10m}\n"
	c, err := Parse([]byte(good), "/etc/opsbot", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	cmds, unattended := c.Auth.TwoPerson.Rules()
	if want := []CommandRule{{"gpu recover", ""}, {"svc stop", "qwen"}, {"mtp per-load", ""}}; !reflect.DeepEqual(cmds, want) {
		t.Errorf("rules %+v, want %+v", cmds, want)
	}
	if len(unattended) != 1 || unattended[0].Path != "gpu recover" || c.Auth.TwoPerson.Expires.D() != 10*time.Minute {
		t.Errorf("unattended %+v, expires %s", unattended, c.Auth.TwoPerson.Expires.D())
	}
	bad := []struct{ from, to, want string }{
		{"svc stop qwen", "svc stpo", `auth.two_person.commands[1]: "svc stpo" is not a command (did you mean "svc stop"?)`},
		{"svc stop qwen", "svc stop qwn", `auth.two_person.commands[1]: unknown service "qwn" (did you mean "qwen"?); the services are coder, qwen`},
		{"svc stop qwen", "svc status", `auth.two_person.commands[1]: "svc status" changes nothing`},
		{"unattended: [gpu recover]", "unattended: [svc start]", `auth.two_person.unattended[0]: "svc start" is not in auth.two_person.commands`},
		{"expires: 10m", "expires: 1s", "auth.two_person.expires: 1s is too short"},
	}
	for _, b := range bad {
		_, err := Parse([]byte(strings.Replace(good, b.from, b.to, 1)), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s -> %s: err %v, want %q", b.from, b.to, err, b.want)
		}
	}
}

// TestAuthGrantMistakes: a grant per service names services that exist,
// roles that are known, and "*" alone.
func TestAuthGrantMistakes(t *testing.T) {
	bad := []struct{ grant, want string }{
		{`{operator: [qwn]}`, `auth.users["slack:UALICE"].operator: unknown service "qwn" (did you mean "qwen"?)`},
		{`{operater: [qwen]}`, `auth.users["slack:UALICE"]: unknown role "operater"`},
		{`{operator: [qwen, "*"]}`, `"*" is every service: write it alone`},
		{`{operator: []}`, `name the services it is granted on`},
		{`[operator]`, `auth.users["slack:UALICE"]: expected a role (viewer, operator, admin), or a mapping of roles to services`},
		{`{operator: {qwen: 1}}`, `expected a role`},
	}
	for _, b := range bad {
		text := strings.Replace(twoServices, `users: {"console:alice": admin}`, `users: {"console:alice": admin, "slack:UALICE": `+b.grant+`}`, 1)
		_, err := Parse([]byte(text), "/etc/opsbot", env(nil))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err %v, want %q", b.grant, err, b.want)
		}
	}
}
