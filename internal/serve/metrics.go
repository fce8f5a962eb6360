// Package serve is the HTTP side of `opsbot serve`: GET /healthz, GET
// /readyz, GET /metrics (Prometheus text format) and the routes of the
// adapters that receive deliveries over HTTP; and the Prometheus metrics
// the bot reports into, as a jobs.Observer and around its Chats and Inbound.
//
// Only cmd imports it; it imports bot's contracts, never an adapter.
package serve

import (
	"context"
	"errors"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/store"
)

// Metrics are opsbot's Prometheus metrics, on a registry of their own. It is
// a jobs.Observer; Chat and Inbound wrap the adapters to count their traffic.
// Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	jobs      *prometheus.CounterVec
	jobDur    *prometheus.HistogramVec
	stepDur   *prometheus.HistogramVec
	queued    prometheus.Gauge
	running   prometheus.Gauge
	lockWait  prometheus.Histogram
	benchOut  *prometheus.GaugeVec
	benchOne  *prometheus.GaugeVec
	acceptLen *prometheus.GaugeVec
	acceptPct *prometheus.GaugeVec
	chatErrs  *prometheus.CounterVec
	requests  *prometheus.CounterVec
	schedule  *prometheus.GaugeVec
	rejected  *prometheus.CounterVec

	started sync.Map // job id -> struct{}: started and not yet ended
}

// Build says which opsbot this is, for opsbot_build_info.
type Build struct {
	Version, Revision, GoVersion string
}

// NewMetrics registers opsbot's metrics, the Go runtime's and the process's.
// ssh, when set, is read at each scrape for the SSH connections' state.
func NewMetrics(b Build, ssh func() []remote.HostState) *Metrics {
	reg := prometheus.NewRegistry()
	jobBuckets := []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}
	m := &Metrics{
		reg: reg,
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opsbot_jobs_total",
			Help: "Jobs that ended, by command and outcome (succeeded, failed, cancelled, interrupted)."}, []string{"command", "outcome"}),
		jobDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "opsbot_job_duration_seconds",
			Help: "Time from a job's acceptance to its end, queue and lock wait included.", Buckets: jobBuckets}, []string{"command"}),
		stepDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "opsbot_step_duration_seconds",
			Help:    "Duration of pipeline steps, by step and how it ended.",
			Buckets: []float64{0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900}}, []string{"step", "status"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "opsbot_jobs_queued",
			Help: "Jobs accepted that have not started: waiting for their service or node."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "opsbot_jobs_running", Help: "Jobs running now in this process."}),
		lockWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "opsbot_lock_wait_seconds",
			Help:    "Time a mutating job waited for its service before it started.",
			Buckets: []float64{0.01, 0.1, 1, 5, 15, 60, 300, 900}}),
		benchOut: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opsbot_bench_output_tokens_per_second",
			Help: "Output throughput of the last benchmark of a service at a speculative steps value."}, []string{"service", "steps"}),
		benchOne: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opsbot_bench_stream_output_tokens_per_second",
			Help: "Per-stream output speed of the last benchmark of a service at a steps value."}, []string{"service", "steps"}),
		acceptLen: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opsbot_bench_accept_length",
			Help: "Mean accepted tokens per verify step in the last benchmark of a service at a steps value."}, []string{"service", "steps"}),
		acceptPct: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opsbot_bench_acceptance_ratio",
			Help: "Draft-token acceptance rate (0..1) in the last benchmark of a service at a steps value."}, []string{"service", "steps"}),
		chatErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opsbot_chat_api_errors_total",
			Help: "Failed calls to a chat platform's API (post, edit, reply), by platform."}, []string{"platform"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opsbot_http_rejected_total",
			Help: "HTTP requests refused before they reached the bot (bad signature, stale timestamp, a body over the limits, too many bodies from one address, a body too slow), by route and reason."},
			[]string{"route", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opsbot_requests_total",
			Help: "Chat requests and actions answered, by platform and outcome."}, []string{"platform", "outcome"}),
		schedule: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opsbot_schedule_last_success_timestamp_seconds",
			Help: "Unix time a schedule's run last succeeded."}, []string{"schedule"}),
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opsbot_build_info",
		Help: "opsbot's version, VCS revision and Go version; always 1."}, []string{"version", "revision", "goversion"})
	info.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	reg.MustRegister(m.jobs, m.jobDur, m.stepDur, m.queued, m.running, m.lockWait, m.benchOut, m.benchOne,
		m.acceptLen, m.acceptPct, m.chatErrs, m.requests, m.schedule, m.rejected, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if ssh != nil {
		reg.MustRegister(&sshCollector{stats: ssh})
	}
	return m
}

// CountStoreWriteErrors exports opsbot_store_write_errors_total, read from
// n at each scrape: the writes the store's database refused (a full disk, a
// read-only file, an I/O error). Call it once.
func (m *Metrics) CountStoreWriteErrors(n func() int64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "opsbot_store_write_errors_total",
		Help: "Writes the store's database refused (a full disk, a read-only file, an I/O error)."},
		func() float64 { return float64(n()) }))
}

// Registry is where the metrics are registered, for /metrics and tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

var _ jobs.Observer = (*Metrics)(nil)

// JobQueued counts a job waiting to run.
func (m *Metrics) JobQueued(store.Job, string) { m.queued.Inc() }

// JobStarted moves a job from queued to running and records its lock wait.
func (m *Metrics) JobStarted(j store.Job, _ string, lockWait time.Duration) {
	m.started.Store(j.ID, struct{}{})
	m.queued.Dec()
	m.running.Inc()
	m.lockWait.Observe(lockWait.Seconds())
}

// StepEnded records a step's duration.
func (m *Metrics) StepEnded(_ store.Job, step string, status ops.StepStatus, took time.Duration) {
	m.stepDur.WithLabelValues(step, string(status)).Observe(took.Seconds())
}

// JobEnded counts the job by outcome, records its duration, and sets the
// benchmark gauges and the schedule's last success from its result.
func (m *Metrics) JobEnded(j store.Job, command string, status store.Status, took time.Duration, res *ops.Result) {
	if _, ok := m.started.LoadAndDelete(j.ID); ok {
		m.running.Dec()
	} else {
		m.queued.Dec() // ended before it started (stopped while waiting for its service)
	}
	m.jobs.WithLabelValues(command, string(status)).Inc()
	m.jobDur.WithLabelValues(command).Observe(took.Seconds())
	if status == store.Succeeded && j.ScheduleID != 0 {
		m.schedule.WithLabelValues(strconv.FormatInt(j.ScheduleID, 10)).SetToCurrentTime()
	}
	if res == nil || j.Service == "" {
		return
	}
	if res.Bench != nil && res.Spec != nil {
		m.bench(j.Service, res.Spec.Steps, res.Bench)
	}
	for _, p := range res.Points {
		if p.Bench != nil && p.Spec != nil {
			m.bench(j.Service, p.Spec.Steps, p.Bench)
		}
	}
}

// bench sets the benchmark gauges of service at steps from b: a figure b
// did not measure removes its series (absent is unknown; never 0).
func (m *Metrics) bench(service string, steps int, b *ops.BenchResult) {
	l := []string{service, strconv.Itoa(steps)}
	al := bench.KnownAcceptLen(b.AcceptLen)
	for _, g := range []struct {
		v     *prometheus.GaugeVec
		f     float64
		known bool
	}{{m.benchOut, b.OutputTokS, bench.Known(b.OutputTokS)}, {m.benchOne, b.PerStreamTokS, bench.Known(b.PerStreamTokS)},
		{m.acceptLen, b.AcceptLen, al}, {m.acceptPct, b.AcceptRate, al && bench.Known(b.AcceptRate)}} {
		if g.known {
			g.v.WithLabelValues(l...).Set(g.f)
		} else {
			g.v.DeleteLabelValues(l...)
		}
	}
}

// ScheduleSucceeded sets a schedule's last success (at start-up, from the store).
func (m *Metrics) ScheduleSucceeded(id int64, at time.Time) {
	m.schedule.WithLabelValues(strconv.FormatInt(id, 10)).Set(float64(at.UnixNano()) / 1e9)
}

// Chat wraps an adapter's Chat to count its API errors under platform. The
// wrapper keeps the chat's edit pacing (bot.Pacer), its user groups
// (bot.Membership) and its users' power levels in rooms (bot.RoomLevels),
// which the bot looks for on the Chats it is given.
func (m *Metrics) Chat(platform string, c bot.Chat) bot.Chat {
	cc := &countingChat{Chat: c, errs: m.chatErrs.WithLabelValues(platform)}
	g, isG := c.(bot.Membership)
	l, isL := c.(bot.RoomLevels)
	switch {
	case isG && isL:
		return struct {
			*countingChat
			bot.Membership
			bot.RoomLevels
		}{cc, g, l}
	case isG:
		return struct {
			*countingChat
			bot.Membership
		}{cc, g}
	case isL:
		return struct {
			*countingChat
			bot.RoomLevels
		}{cc, l}
	}
	return cc
}

type countingChat struct {
	bot.Chat
	errs prometheus.Counter
}

func (c *countingChat) count(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		c.errs.Inc()
	}
}

func (c *countingChat) Post(ctx context.Context, room string, msg bot.Message) (bot.Ref, error) {
	r, err := c.Chat.Post(ctx, room, msg)
	c.count(ctx, err)
	return r, err
}

func (c *countingChat) Edit(ctx context.Context, ref bot.Ref, msg bot.Message) error {
	err := c.Chat.Edit(ctx, ref, msg)
	c.count(ctx, err)
	return err
}

func (c *countingChat) Reply(ctx context.Context, ref bot.Ref, msg bot.Message) (bot.Ref, error) {
	r, err := c.Chat.Reply(ctx, ref, msg)
	c.count(ctx, err)
	return r, err
}

// EditInterval is the wrapped chat's, or 0 when it sets none.
func (c *countingChat) EditInterval() time.Duration {
	if p, ok := c.Chat.(bot.Pacer); ok {
		return p.EditInterval()
	}
	return 0
}

// Inbound wraps in to count the requests and actions it answers.
func (m *Metrics) Inbound(in bot.Inbound) bot.Inbound { return &countingInbound{in: in, m: m} }

type countingInbound struct {
	in bot.Inbound
	m  *Metrics
}

func (c *countingInbound) Handle(ctx context.Context, req bot.Request) bot.Reply {
	r := c.in.Handle(ctx, req)
	c.m.requests.WithLabelValues(req.Platform, string(r.Outcome)).Inc()
	return r
}

func (c *countingInbound) Act(ctx context.Context, a bot.ActionRequest) bot.Reply {
	r := c.in.Act(ctx, a)
	c.m.requests.WithLabelValues(a.Platform, string(r.Outcome)).Inc()
	return r
}

func (c *countingInbound) Previewed(ctx context.Context, token, messageID string) error {
	return c.in.Previewed(ctx, token, messageID)
}

// sshCollector reads the SSH pool's state at each scrape.
type sshCollector struct {
	stats func() []remote.HostState
}

var (
	sshUpDesc = prometheus.NewDesc("opsbot_ssh_connected",
		"Whether opsbot holds a live SSH connection to the host (1) or not (0).", []string{"host"}, nil)
	sshErrDesc = prometheus.NewDesc("opsbot_ssh_dial_errors_total",
		"Failed SSH connection attempts to the host (TCP, handshake or host key).", []string{"host"}, nil)
)

func (s *sshCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sshUpDesc
	ch <- sshErrDesc
}

func (s *sshCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range s.stats() {
		up := 0.0
		if h.Connected {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(sshUpDesc, prometheus.GaugeValue, up, h.Name)
		ch <- prometheus.MustNewConstMetric(sshErrDesc, prometheus.CounterValue, float64(h.DialErrors), h.Name)
	}
}

// BuildInfo reads the version, VCS revision and Go version Go embedded in
// the binary; version and revision, when not empty, override them (set
// with -ldflags -X for releases).
func BuildInfo(version, revision string) Build {
	b := Build{Version: "(devel)", Revision: "unknown", GoVersion: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					b.Revision += "+dirty"
				}
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	if revision != "" {
		b.Revision = revision
	}
	return b
}

// ExportStoreStats exports, read from stats at each scrape (nothing while it
// reports false, before the store is open): opsbot_store_statement_duration_seconds
// (a histogram of the store's statements and write transactions, with
// the driver as a label), opsbot_store_errors_total (those that failed),
// opsbot_store_connections_in_use and opsbot_store_connections_max (the
// pool, bounded by store.max_conns on PostgreSQL). Call it once.
func (m *Metrics) ExportStoreStats(stats func() (store.Stats, bool)) {
	m.reg.MustRegister(&storeCollector{stats: stats})
}

var (
	storeLatencyDesc = prometheus.NewDesc("opsbot_store_statement_duration_seconds",
		"How long the store's statements (reads) and write transactions took.", []string{"driver"}, nil)
	storeErrorsDesc = prometheus.NewDesc("opsbot_store_errors_total",
		"The store's statements and write transactions that failed (the database refused or did not answer in time).", []string{"driver"}, nil)
	storeInUseDesc = prometheus.NewDesc("opsbot_store_connections_in_use",
		"Connections to the store's database in use now.", []string{"driver"}, nil)
	storeMaxDesc = prometheus.NewDesc("opsbot_store_connections_max",
		"The most connections opsbot opens to the store's database (store.max_conns on PostgreSQL).", []string{"driver"}, nil)
)

// storeCollector reads the store's counters at each scrape.
type storeCollector struct {
	stats func() (store.Stats, bool)
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeLatencyDesc
	ch <- storeErrorsDesc
	ch <- storeInUseDesc
	ch <- storeMaxDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats()
	if !ok {
		return
	}
	buckets := make(map[float64]uint64, len(store.StatementBuckets))
	for i, le := range store.StatementBuckets {
		buckets[le] = uint64(st.Buckets[i])
	}
	ch <- prometheus.MustNewConstHistogram(storeLatencyDesc, uint64(st.Statements), st.Sum.Seconds(), buckets, st.Driver)
	ch <- prometheus.MustNewConstMetric(storeErrorsDesc, prometheus.CounterValue, float64(st.Errors), st.Driver)
	ch <- prometheus.MustNewConstMetric(storeInUseDesc, prometheus.GaugeValue, float64(st.InUse), st.Driver)
	ch <- prometheus.MustNewConstMetric(storeMaxDesc, prometheus.GaugeValue, float64(st.MaxConns), st.Driver)
}

// ExportLeases exports opsbot_lease_held{lease}: 1 for each of keys (the
// leases of one holder among the processes sharing a store: the scheduler,
// the watchdog) this process holds now, 0 for the others, read by holds at
// each scrape (ok false: not known yet, nothing exported). With two opsbot
// on one store, the sum over both is 1 for each lease once one took it.
// Call it once.
func (m *Metrics) ExportLeases(keys []string, holds func(key string) (held, ok bool)) {
	m.reg.MustRegister(&leaseCollector{keys: keys, holds: holds})
}

var leaseHeldDesc = prometheus.NewDesc("opsbot_lease_held",
	"1 when this opsbot process holds the lease (the scheduler's, the watchdog's: one process among those sharing the store), else 0.",
	[]string{"lease"}, nil)

// leaseCollector reads the holds at each scrape.
type leaseCollector struct {
	keys  []string
	holds func(key string) (bool, bool)
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- leaseHeldDesc }

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.keys {
		held, ok := c.holds(k)
		if !ok {
			return
		}
		v := 0.0
		if held {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(leaseHeldDesc, prometheus.GaugeValue, v, k)
	}
}
