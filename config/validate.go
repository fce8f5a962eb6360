package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Roles known to auth, lowest first.
var Roles = []string{"none", "viewer", "operator", "admin"}

func knownRole(r string) bool {
	for _, k := range Roles {
		if k == r {
			return true
		}
	}
	return false
}

// Validate reports every problem in the config at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	c.validateReports(bad)
	c.validateStore(bad)
	c.validateSSH(bad)
	c.validateHosts(bad)
	c.validateRollout(bad)
	c.validateServices(bad)
	c.validateAuth(bad)
	c.validateLimits(bad)
	c.validateRetention(bad)
	c.validateServe(bad)
	if s := c.Slack; s != nil && s.Enabled {
		c.validateSlack(bad)
	}
	if m := c.Matrix; m != nil && m.Enabled {
		c.validateMatrix(bad)
	}
	c.validateSchedules(bad)
	if len(errs) > 0 {
		return &Error{Problems: errs}
	}
	return nil
}

// validateReports checks sweep.metric and alerts.
func (c *Config) validateReports(bad func(string, ...any)) {
	if c.Sweep.Metric != "" && !slices.Contains(SweepMetrics, c.Sweep.Metric) {
		bad("sweep.metric: %q is not one of %s", c.Sweep.Metric, strings.Join(SweepMetrics, ", "))
	}
	if c.Alerts.RegressionPct < 0 || c.Alerts.RegressionPct >= 100 {
		bad("alerts.regression_pct: %d is not a percentage in 1..99 (a drop of more than it below the median alerts)", c.Alerts.RegressionPct)
	}
	if c.Alerts.RegressionRuns < 0 || c.Alerts.RegressionRuns > 1000 {
		bad("alerts.regression_runs: %d is not in 1..1000 (the comparable runs whose median a result is judged against)", c.Alerts.RegressionRuns)
	}
}

// validateLimits checks limits.max_steps, limits.lease_ttl and
// limits.stranded_after.
func (c *Config) validateLimits(bad func(string, ...any)) {
	if c.Limits.MaxSteps < 1 || c.Limits.MaxSteps > 64 {
		bad("limits.max_steps must be within 1..64, got %d", c.Limits.MaxSteps)
	}
	if c.Limits.LeaseTTL < Duration(time.Second) {
		bad("limits.lease_ttl must be at least 1s, got %s", c.Limits.LeaseTTL.D())
	}
	// A driver frees a dead process's memory within seconds; below 2s a slow
	// release would be offered a reset, above 10m nobody waits that long.
	if d := c.Limits.StrandedAfter.D(); d < 2*time.Second || d > 10*time.Minute {
		bad("limits.stranded_after must be within 2s..10m, got %s", d)
	}
}

// validateRetention checks store.retention.
func (c *Config) validateRetention(bad func(string, ...any)) {
	if c.Store.Retention < Duration(time.Hour) {
		bad("store.retention must be at least 1h (e.g. 90d), got %s", c.Store.Retention.D())
	}
}

// validateServe checks what `opsbot serve` itself runs with: http.listen,
// http.trusted_proxies and log.
func (c *Config) validateServe(bad func(string, ...any)) {
	if l := c.HTTP.Listen; l != "" {
		if err := checkListen(l); err != nil {
			bad("http.listen must be HOST:PORT, like 127.0.0.1:9090: %v", err)
		}
	}
	for i, cidr := range c.HTTP.TrustedProxies {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			one := "192.0.2.7/32"
			if a, err := netip.ParseAddr(cidr); err == nil {
				one = netip.PrefixFrom(a, a.BitLen()).String()
			}
			bad("http.trusted_proxies[%d]: %q is not a CIDR: write a network like 10.0.0.0/8, or one proxy as %s", i, cidr, one)
		}
	}
	if f := c.Log.Format; f != "text" && f != "json" {
		bad("log.format must be text or json, got %q", f)
	}
	if _, err := LogLevel(c.Log.Level); err != nil {
		bad("log.level: %v", err)
	}
}

// checkListen checks a listen address is HOST:PORT with a numeric port.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number within 0..65535", port)
	}
	return nil
}

// LogLevel returns the slog level named by log.level.
func LogLevel(name string) (slog.Level, error) {
	switch name {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("must be debug, info, warn or error, got %q", name)
}
