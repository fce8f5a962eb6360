package config

import (
	"net/url"
	"regexp"
	"strings"
)

// Slack configures the Slack adapter. In Socket Mode (the default) the bot
// dials Slack with AppToken and needs no public URL; in HTTP mode Slack posts
// to POST /slack/events on http.listen, signed with SigningSecret.
type Slack struct {
	Enabled bool `yaml:"enabled"`
	// Mode is SlackModeSocket (default) or SlackModeHTTP.
	Mode          string `yaml:"mode,omitempty"`
	BotToken      Secret `yaml:"bot_token"`
	AppToken      Secret `yaml:"app_token,omitempty"`      // socket mode: xapp-...
	SigningSecret Secret `yaml:"signing_secret,omitempty"` // http mode
	// APIURL is the Slack Web API base, ending in "/"; unset, Slack's own
	// (https://slack.com/api/).
	APIURL string `yaml:"api_url,omitempty"`
	// Channel is the channel id scheduled reports and alerts go to.
	Channel string `yaml:"channel,omitempty"`
	// Channels are the channel ids commands are taken from; a command
	// anywhere else is refused.
	Channels []string `yaml:"channels,omitempty"`
	// AllowDMs lets users run commands in a direct message with the bot.
	AllowDMs bool `yaml:"allow_dms,omitempty"`
}

// Slack modes.
const (
	SlackModeSocket = "socket"
	SlackModeHTTP   = "http"
)

// slackIDRE matches Slack's ids of channels, users and user groups.
var slackIDRE = regexp.MustCompile(`^[A-Z0-9]{2,32}$`)

// Matrix configures the Matrix adapter.
type Matrix struct {
	Enabled bool `yaml:"enabled"`
	// Homeserver is the client-server API's base URL, http(s)://HOST[:PORT].
	Homeserver string `yaml:"homeserver"`
	// UserID is the bot's account, "@opsbot:example.org".
	UserID string `yaml:"user_id"`
	// AccessToken, or Password: with a password the bot logs in once and
	// keeps the device id and access token it got in the store.
	AccessToken Secret `yaml:"access_token,omitempty"`
	Password    Secret `yaml:"password,omitempty"`
	// Rooms are the room ids ("!abc:example.org") the bot joins and obeys;
	// invites to other rooms are declined, commands there ignored.
	Rooms []string `yaml:"rooms"`
	// StaleAfter: a command older than this when the bot first sees it (it
	// was sent while the bot was down) is answered "stale, not run".
	StaleAfter Duration `yaml:"stale_after,omitempty"`
	// PowerLevels grants roles from the sender's power level in the room
	// where the command (or the reaction) is sent, as the room's
	// m.room.power_levels state says: {operator: 50, admin: 100} makes a
	// member at level 50 or more an operator and one at 100 or more an
	// admin there. Keys are roles (viewer, operator, admin; any subset),
	// values Matrix power levels; a higher role needs a level at least as
	// high as a lower one's (at equal levels the higher role is granted). A
	// user holds the highest of this role and the one auth gives their id.
	PowerLevels map[string]int `yaml:"power_levels,omitempty"`
	// Encryption turns on end-to-end encryption: the bot reads and writes
	// encrypted rooms as its own device, its keys kept in the store. It
	// needs a binary built with -tags goolm (MatrixEncryptionBuilt); other
	// builds refuse true.
	Encryption bool `yaml:"encryption,omitempty"`
	// RecoveryKey is the account's recovery key (the key of its secret
	// storage, where its cross-signing keys are kept): with it a new device
	// of an account that already has cross-signing keys (a new store, a
	// second machine) signs itself. Not needed on the store that made the
	// keys (it keeps the recovery key: `opsbot matrix recovery-key`).
	RecoveryKey Secret `yaml:"recovery_key,omitempty"`
}

var (
	matrixID     = regexp.MustCompile(`^@[^:\s]+:[^\s]+$`)
	matrixRoomID = regexp.MustCompile(`^![^:\s]+:[^\s]+$`)
)

// validateMatrix checks the enabled matrix section.
func (c *Config) validateMatrix(bad func(string, ...any)) {
	m := c.Matrix
	if m.Homeserver == "" {
		bad("matrix.homeserver is required when matrix is enabled")
	}
	if m.UserID == "" {
		bad("matrix.user_id is required when matrix is enabled")
	}
	if m.AccessToken == "" && m.Password == "" {
		bad("matrix.access_token or matrix.password is required when matrix is enabled")
	}
	if len(m.Rooms) == 0 {
		bad("matrix.rooms must list the rooms the bot obeys")
	}
	if m.Homeserver != "" {
		if u, err := url.Parse(m.Homeserver); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("matrix.homeserver: want the homeserver's base URL, e.g. https://matrix.example.org")
		}
	}
	if m.UserID != "" && !matrixID.MatchString(m.UserID) {
		bad("matrix.user_id: want a Matrix user id, e.g. @opsbot:example.org")
	}
	for i, r := range m.Rooms {
		if !matrixRoomID.MatchString(r) {
			bad("matrix.rooms[%d]: want a room id, e.g. !abc:example.org (Element: Room settings > Advanced), not an alias or a name", i)
		}
	}
	validatePowerLevels(m.PowerLevels, bad)
	if m.RecoveryKey != "" && !m.Encryption {
		bad("matrix.recovery_key is for end-to-end encryption: set matrix.encryption: true, or remove the key")
	}
	if m.Encryption && !MatrixEncryptionBuilt {
		bad("matrix.encryption: end-to-end encryption is not in this build of opsbot (build it with -tags goolm, as the release builds are), " +
			"or use a room without encryption and set encryption: false")
	}
}

// MaxPowerLevel is the largest power level Matrix allows (canonical JSON
// integers are within ±(2^53-1)).
const MaxPowerLevel = 1<<53 - 1

// validatePowerLevels checks matrix.power_levels: roles by name (not
// "none"), levels within Matrix's range, and a higher role never at a lower
// level than a lower role.
func validatePowerLevels(levels map[string]int, bad func(string, ...any)) {
	type grant struct {
		role  string
		level int
	}
	var order []grant // the roles set, lowest role first
	for _, role := range Roles {
		if l, ok := levels[role]; ok && role != "none" {
			order = append(order, grant{role, l})
		}
	}
	for _, role := range sortedKeys(levels) {
		l := levels[role]
		switch {
		case role == "none":
			bad("matrix.power_levels.none: none is not a role to grant; list viewer, operator or admin")
		case !knownRole(role):
			bad("matrix.power_levels.%s: unknown role (one of viewer, operator, admin), e.g. power_levels: {operator: 50, admin: 100}", role)
		case l < -MaxPowerLevel || l > MaxPowerLevel:
			bad("matrix.power_levels.%s: %d is not a Matrix power level (within ±%d)", role, l, MaxPowerLevel)
		}
	}
	for i := 1; i < len(order); i++ {
		if hi, lo := order[i], order[i-1]; hi.level < lo.level {
			bad("matrix.power_levels: %s needs a level at least as high as %s's, got %s: %d below %s: %d",
				hi.role, lo.role, hi.role, hi.level, lo.role, lo.level)
		}
	}
}

// validateSlack checks the enabled slack section, naming each problem by its
// key and never quoting a secret.
func (c *Config) validateSlack(bad func(string, ...any)) {
	s := c.Slack
	switch s.Mode {
	case SlackModeSocket:
		if s.AppToken == "" {
			bad("slack.app_token is required in socket mode (an app-level token, xapp-..., with connections:write)")
		} else if resolved(s.AppToken) && !strings.HasPrefix(s.AppToken.Value(), "xapp-") {
			bad("slack.app_token must be an app-level token (xapp-...)")
		}
	case SlackModeHTTP:
		if s.SigningSecret == "" {
			bad("slack.signing_secret is required in http mode (the app's Basic Information page shows it)")
		}
	default:
		bad("slack.mode must be %s or %s", SlackModeHTTP, SlackModeSocket)
	}
	if s.BotToken == "" {
		bad("slack.bot_token is required when slack is enabled")
	} else if resolved(s.BotToken) && !strings.HasPrefix(s.BotToken.Value(), "xoxb-") {
		bad("slack.bot_token must be a bot token (xoxb-...)")
	}
	if s.APIURL != "" {
		u, err := url.Parse(s.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.HasSuffix(u.Path, "/") {
			bad("slack.api_url must be an http(s) URL ending in /, such as https://slack.com/api/")
		}
	}
	if s.Channel != "" && !slackIDRE.MatchString(s.Channel) {
		bad("slack.channel must be a channel id such as C0123ABCD (the channel's details show it), not a name")
	}
	if len(s.Channels) == 0 && !s.AllowDMs {
		bad("slack.channels must list the channel ids commands are taken from (or set slack.allow_dms: true)")
	}
	for i, ch := range s.Channels {
		if !slackIDRE.MatchString(ch) {
			bad("slack.channels[%d] must be a channel id such as C0123ABCD, not a name", i)
		}
	}
}
