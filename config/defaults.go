package config

import (
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/ops/gpu"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/ops/router"
	"github.com/opsbot/opsbot/ops/unit"
	"github.com/opsbot/opsbot/store"
)

// The defaults Load applies when a key is unset: one table, one home for
// each value. A default whose behaviour another package owns is that
// package's constant (the SSH pool's timeouts, the store's connection cap,
// the runbook's service defaults), so the two can never disagree.
const (
	// DefaultMaxSteps is limits.max_steps.
	DefaultMaxSteps = unit.DefaultMaxSteps
	// DefaultJobTimeout is limits.job_timeout.
	DefaultJobTimeout = 30 * time.Minute
	// DefaultConfirmTTL is limits.confirm_ttl.
	DefaultConfirmTTL = 2 * time.Minute
	// DefaultLeaseTTL is limits.lease_ttl.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultShutdownGrace is limits.shutdown_grace.
	DefaultShutdownGrace = 60 * time.Second
	// DefaultStrandedAfter is limits.stranded_after.
	DefaultStrandedAfter = ops.DefaultStrandedAfter

	// DefaultStoreDriver is store.driver.
	DefaultStoreDriver = StoreSQLite
	// DefaultStoreMaxConns is store.max_conns (driver postgres).
	DefaultStoreMaxConns = store.DefaultMaxConns
	// DefaultRetention is store.retention.
	DefaultRetention = 90 * 24 * time.Hour

	// DefaultSSHConnectTimeout is ssh.connect_timeout.
	DefaultSSHConnectTimeout = remote.DefaultConnectTimeout
	// DefaultSSHKeepAlive is ssh.keepalive.
	DefaultSSHKeepAlive = remote.DefaultKeepAlive

	// DefaultEngine is services.NAME.engine.
	DefaultEngine = unit.DefaultEngine
	// DefaultEdit is services.NAME.edit.
	DefaultEdit = "in-place"
	// DefaultReadyTimeout is services.NAME.ready_timeout.
	DefaultReadyTimeout = engine.DefaultReadyTimeout
	// DefaultClearMiB is services.NAME.clear_mib.
	DefaultClearMiB = gpu.DefaultClearMiB

	// DefaultRouterKind is services.NAME.router.kind: the only kind.
	DefaultRouterKind = router.KindSGLang
	// DefaultMinTokSRatio is rollout.gate.min_tok_s_ratio: a canary within
	// 3% of its sibling's output tok/s passes.
	DefaultMinTokSRatio = ops.DefaultMinTokSRatio
	// DefaultMaxTTFTP95Ratio is rollout.gate.max_ttft_p95_ratio: a canary
	// whose TTFT p95 is at most 20% above its sibling's passes.
	DefaultMaxTTFTP95Ratio = ops.DefaultMaxTTFTP95Ratio
	// DefaultMaxUnavailable is rollout.max_unavailable: one replica out of
	// its router at a time.
	DefaultMaxUnavailable = ops.DefaultMaxUnavailable
	// DefaultDrainTimeout is rollout.drain_timeout: how long a drained
	// replica's in-flight requests may take before its engine stops anyway.
	DefaultDrainTimeout = Duration(ops.DefaultDrainTimeout)
	// DefaultUnavailableWait is rollout.unavailable_wait: how long a drain
	// waits for another replica to come back before it refuses.
	DefaultUnavailableWait = Duration(ops.DefaultUnavailableWait)

	// DefaultLogFormat and DefaultLogLevel are log.format and log.level.
	DefaultLogFormat = "text"
	DefaultLogLevel  = "info"
	// DefaultAuthRole is auth.default_role.
	DefaultAuthRole = "none"
	// DefaultApprovalTTL is auth.two_person.expires: how long a command
	// waits for a second person's approval.
	DefaultApprovalTTL = 30 * time.Minute
	// DefaultTimezone is timezone.
	DefaultTimezone = "UTC"

	// DefaultWatchdogInterval is how often the watchdog looks when
	// watchdog.interval is unset.
	DefaultWatchdogInterval = time.Minute
	// DefaultWatchdogRemind is watchdog.remind when unset.
	DefaultWatchdogRemind = 30 * time.Minute

	// DefaultMatrixStaleAfter is matrix.stale_after when unset.
	DefaultMatrixStaleAfter = 5 * time.Minute

	// Regression alert defaults: alerts.regression_pct and
	// alerts.regression_runs.
	DefaultRegressionPct  = 10
	DefaultRegressionRuns = 7
)

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// applyDefaults fills every unset key with its default and resolves the
// paths against the config file's directory.
func (c *Config) applyDefaults() {
	if c.Slack != nil {
		orDefault(&c.Slack.Mode, SlackModeSocket)
	}
	c.applyLimitDefaults()
	c.applyStoreDefaults()
	orDefault(&c.Log.Format, DefaultLogFormat)
	orDefault(&c.Log.Level, DefaultLogLevel)
	orDefault(&c.Auth.DefaultRole, DefaultAuthRole)
	orDefault(&c.Auth.TwoPerson.Expires, Duration(DefaultApprovalTTL))
	if c.Matrix != nil {
		orDefault(&c.Matrix.StaleAfter, Duration(DefaultMatrixStaleAfter))
	}
	c.applyScheduleDefaults()
	orDefault(&c.SSH.ConnectTimeout, Duration(DefaultSSHConnectTimeout))
	orDefault(&c.SSH.KeepAlive, Duration(DefaultSSHKeepAlive))
	c.applyReportDefaults()
	c.applyServiceDefaults()
	c.resolvePaths()
}

// applyLimitDefaults fills limits.
func (c *Config) applyLimitDefaults() {
	orDefault(&c.Limits.MaxSteps, DefaultMaxSteps)
	orDefault(&c.Limits.JobTimeout, Duration(DefaultJobTimeout))
	orDefault(&c.Limits.ConfirmTTL, Duration(DefaultConfirmTTL))
	orDefault(&c.Limits.LeaseTTL, Duration(DefaultLeaseTTL))
	orDefault(&c.Limits.ShutdownGrace, Duration(DefaultShutdownGrace))
	orDefault(&c.Limits.StrandedAfter, Duration(DefaultStrandedAfter))
}

// applyStoreDefaults fills store: max_conns only for postgres, where
// Validate refuses it for sqlite.
func (c *Config) applyStoreDefaults() {
	orDefault(&c.Store.Retention, Duration(DefaultRetention))
	orDefault(&c.Store.Driver, DefaultStoreDriver)
	if c.Store.Driver == StorePostgres {
		orDefault(&c.Store.MaxConns, DefaultStoreMaxConns)
	}
}

// applyScheduleDefaults fills timezone, watchdog and each schedule's missed.
func (c *Config) applyScheduleDefaults() {
	orDefault(&c.Timezone, DefaultTimezone)
	orDefault(&c.Watchdog.Interval, Duration(DefaultWatchdogInterval))
	orDefault(&c.Watchdog.Remind, Duration(DefaultWatchdogRemind))
	if len(c.Watchdog.Hardware.XIDs) == 0 {
		// gpu.DefaultPagingXIDs: a reset or worse, and failing memory.
		c.Watchdog.Hardware.XIDs = append([]int(nil), gpu.DefaultPagingXIDs...)
	}
	for i := range c.Schedules {
		orDefault(&c.Schedules[i].Missed, MissedSkip)
	}
}

// applyReportDefaults fills bench (ops.DefaultBench), sweep and alerts.
func (c *Config) applyReportDefaults() {
	b := ops.DefaultBench()
	orDefault(&c.Bench.Prompts, b.Prompts)
	orDefault(&c.Bench.Concurrency, b.Concurrency)
	orDefault(&c.Bench.InputLen, b.InputLen)
	orDefault(&c.Bench.OutputLen, b.OutputLen)
	orDefault(&c.Sweep.Metric, SweepMetrics[0])
	orDefault(&c.Alerts.RegressionPct, DefaultRegressionPct)
	orDefault(&c.Alerts.RegressionRuns, DefaultRegressionRuns)
}

// applyServiceDefaults fills each service's engine, edit, ready_timeout,
// clear_mib and router kind (its replicas share them), and rollout.
func (c *Config) applyServiceDefaults() {
	for name, s := range c.Services {
		orDefault(&s.Engine, DefaultEngine)
		orDefault(&s.Edit, DefaultEdit)
		orDefault(&s.ReadyTimeout, Duration(DefaultReadyTimeout))
		orDefault(&s.ClearMiB, DefaultClearMiB)
		if s.Router != nil {
			r := *s.Router
			orDefault(&r.Kind, DefaultRouterKind)
			s.Router = &r
		}
		c.Services[name] = s
	}
	orDefault(&c.Rollout.Gate.MinTokSRatio, DefaultMinTokSRatio)
	orDefault(&c.Rollout.Gate.MaxTTFTP95Ratio, DefaultMaxTTFTP95Ratio)
	orDefault(&c.Rollout.MaxUnavailable, DefaultMaxUnavailable)
	orDefault(&c.Rollout.DrainTimeout, DefaultDrainTimeout)
	orDefault(&c.Rollout.UnavailableWait, DefaultUnavailableWait)
}

// resolvePaths resolves the store's file and the SSH key and known_hosts
// against the config file's directory.
func (c *Config) resolvePaths() {
	if c.Store.Driver != StorePostgres {
		c.Store.Path = c.Path(c.Store.Path)
	}
	c.SSH.KeyFile = c.Path(c.SSH.KeyFile)
	c.SSH.KnownHosts = c.Path(c.SSH.KnownHosts)
}
