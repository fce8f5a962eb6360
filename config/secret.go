package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
)

// Secret is a value that is never printed. In YAML it is either a literal, a
// "${ENV_VAR}" reference, or a "file:/path" reference whose content (trimmed) is
// the value.
type Secret string

// String returns a redacted form so secrets never reach logs by accident.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// LogValue keeps the secret out of logs, JSON ones included.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalJSON writes the secret redacted, so a config (or a part of one)
// logged or encoded as JSON never shows it.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Value returns the secret itself.
func (s Secret) Value() string { return string(s) }

var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

func (c *Config) resolveSecret(name string, s *Secret, lookup func(string) (string, bool)) error {
	v := string(*s)
	switch {
	case v == "":
		return nil
	case envRef.MatchString(v):
		key := envRef.FindStringSubmatch(v)[1]
		c.envSecrets = append(c.envSecrets, key)
		val, ok := lookup(key)
		if !ok || val == "" {
			return fmt.Errorf("%s refers to ${%s}, which is not set in the environment", name, key)
		}
		*s = Secret(val)
	case strings.HasPrefix(v, "file:"):
		p := c.Path(strings.TrimPrefix(v, "file:"))
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("%s: read secret file: %w", name, err)
		}
		*s = Secret(strings.TrimSpace(string(b)))
	default:
		c.literalSecrets = append(c.literalSecrets, name)
	}
	return nil
}

// resolveSecrets resolves the secrets of the enabled adapters; a disabled
// adapter needs none, so its references are left as written.
func (c *Config) resolveSecrets(lookup func(string) (string, bool)) []error {
	type ref struct {
		name string
		s    *Secret
	}
	var refs []ref
	if c.Slack != nil && c.Slack.Enabled {
		refs = append(refs, ref{"slack.bot_token", &c.Slack.BotToken}, ref{"slack.app_token", &c.Slack.AppToken},
			ref{"slack.signing_secret", &c.Slack.SigningSecret})
	}
	if c.Matrix != nil && c.Matrix.Enabled {
		refs = append(refs, ref{"matrix.access_token", &c.Matrix.AccessToken}, ref{"matrix.password", &c.Matrix.Password},
			ref{"matrix.recovery_key", &c.Matrix.RecoveryKey})
	}
	if c.Store.Driver == StorePostgres {
		refs = append(refs, ref{"store.url", &c.Store.URL})
	}
	var errs []error
	for _, r := range refs {
		if err := c.resolveSecret(r.name, r.s, lookup); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// resolved reports whether a secret holds its value rather than a reference
// that could not be resolved (that problem is reported on its own).
func resolved(s Secret) bool {
	v := s.Value()
	return !strings.HasPrefix(v, "${") && !strings.HasPrefix(v, "file:")
}
