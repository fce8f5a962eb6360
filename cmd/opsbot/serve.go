package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opsbot/opsbot/app"
	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/bot/matrix"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/internal/serve"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops/remote"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/schedule"
	"github.com/opsbot/opsbot/store"
	"github.com/opsbot/opsbot/watchdog"
)

// version and revision name a release build; empty, they come from what Go
// embeds (debug.ReadBuildInfo). Set them with
// -ldflags "-X main.version=v1.2.0 -X main.revision=$(git rev-parse HEAD)".
var version, revision string

// cmdVersion is `opsbot version`.
func cmdVersion(args []string, stdout io.Writer) error {
	if wantsHelp(args) {
		return &helpRequest{text: helpText(newFlagSet("version", io.Discard))}
	}
	if len(args) > 0 {
		return usagef("version takes no arguments")
	}
	b := serve.BuildInfo(version, revision)
	e2ee := "not built in (build with -tags goolm)"
	if config.MatrixEncryptionBuilt {
		e2ee = "built in"
	}
	fmt.Fprintf(stdout, "opsbot %s\nrevision %s\n%s\nmatrix end-to-end encryption: %s\n", b.Version, b.Revision, b.GoVersion, e2ee)
	return nil
}

// adapterFactory builds the chat adapter a config section enables.
type adapterFactory func(cfg *config.Config, log *slog.Logger) (bot.Adapter, error)

// adapterFactories are the chat adapters `opsbot serve` can host, by config
// section ("slack", "matrix"): one line per adapter package.
var adapterFactories = map[string]adapterFactory{}

// extraAdapters are hosted whatever the config says. Empty in opsbot; this
// package's tests add one before running the binary as opsbot.
var extraAdapters []adapterFactory

// cmdServe is `opsbot serve --config FILE [--lab ...]`: the bot as a
// service, until SIGTERM or SIGINT (or ctx ends). The first signal stops it
// gracefully within limits.shutdown_grace and returns nil (exit 0); a second
// one exits at once (exit 1). SIGHUP reloads the config.
func cmdServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	configPath := fs.String("config", "", "config `FILE`")
	useLab := fs.Bool("lab", false, "start the lab in-process: it supplies ssh, hosts, services, default_service and bench")
	labFaults := fs.String("lab-faults", "", lab.FaultHelp("comma-separated lab faults `LIST`, e.g. orphans,slow-load=5s (they apply to both services):"))
	labUnit := fs.String("lab-unit", "", "seed the lab service's unit with this `FILE`")
	labReplicas := fs.Int("lab-replicas", 0, "run the lab's qwen as `N` replicas (2 to 8, 4 GPUs each) qwen@gpu1 ... behind the lab's router, instead of qwen and coder")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *configPath == "" {
		return usagef("serve needs --config FILE (with --lab, a config of store, http, auth and a chat section is enough)")
	}
	// Signals first: a SIGTERM during start-up must not kill the process
	// halfway through opening the store.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	// The file alone says how to log, before anything else runs. With --lab
	// the file alone may not load (its schedules name the lab's services):
	// its log section still counts, and run stops on what does not load
	// once the lab completes it.
	first, err := config.Load(*configPath)
	if err != nil && !*useLab {
		return err
	}
	logCfg := config.Log{Format: config.DefaultLogFormat, Level: config.DefaultLogLevel}
	if first != nil {
		logCfg = first.Log
	} else if c, _ := config.Inspect(*configPath); c != nil && c.Log.Level != "" {
		logCfg = c.Log
	}
	log, err := newServeLogger(stderr, logCfg)
	if err != nil {
		return err
	}
	s := &server{log: log}
	s.metrics = serve.NewMetrics(serve.BuildInfo(version, revision), s.sshStats)
	s.metrics.CountStoreWriteErrors(func() int64 {
		if e := s.env.Load(); e != nil {
			return e.app.Store.WriteErrors()
		}
		return 0
	})
	s.metrics.ExportStoreStats(func() (store.Stats, bool) {
		if e := s.env.Load(); e != nil {
			return e.app.Store.Stats(), true
		}
		return store.Stats{}, false
	})
	s.metrics.ExportLeases([]string{schedule.SchedulerLease, watchdog.WatchdogLease}, func(key string) (bool, bool) {
		if e := s.env.Load(); e != nil {
			return e.app.Leases.Holds(key), true
		}
		return false, false
	})
	return s.run(ctx, sigs, setupOptions{ConfigPath: *configPath, Lab: *useLab, LabFaults: *labFaults, LabUnit: *labUnit, LabReplicas: *labReplicas})
}

// server is one `opsbot serve` process.
type server struct {
	log     *slog.Logger
	metrics *serve.Metrics
	env     atomic.Pointer[env]
	// serving is set once the scheduler and the watchdog started: the
	// config's schedules are in the store from then on.
	serving  atomic.Bool
	adapters []bot.Adapter
	// runErrs holds the error of an adapter whose Run gave up, by platform.
	runErrs sync.Map
	// phase is what start-up waits for now (setupOptions.Phase), for /readyz.
	phase atomic.Pointer[string]
}

func (s *server) sshStats() []remote.HostState {
	if e := s.env.Load(); e != nil {
		return e.runbooks.SSHStats()
	}
	return nil
}

// ready is /readyz: the service started (the config's schedules are in
// the store), the store answers and every adapter is connected.
func (s *server) ready(ctx context.Context) error {
	e := s.env.Load()
	if e == nil {
		what := "opening the store"
		if p := s.phase.Load(); p != nil {
			what = *p
		}
		return errors.New("starting: " + what)
	}
	if !s.serving.Load() {
		return errors.New("starting: the scheduler and the watchdog")
	}
	if e.app.Dispatcher.Draining() {
		return errors.New("stopping: " + bot.RestartingText)
	}
	if err := e.app.Store.Ping(ctx); err != nil {
		return err
	}
	for _, a := range s.adapters {
		if v, ok := s.runErrs.Load(a.Platform()); ok {
			return fmt.Errorf("%s: stopped: %v", a.Platform(), v)
		}
		if err := a.Ready(); err != nil {
			return fmt.Errorf("%s: %w", a.Platform(), err)
		}
	}
	return nil
}

// SchedulerTimeScaleEnv, set to FACTOR@EPOCH (schedule.ParseTimeScale), runs
// serve's scheduler clock FACTOR times faster: for tests and benchmarks of
// schedules, which fire at most once a minute. Never set in production.
const SchedulerTimeScaleEnv = "OPSBOT_SCHEDULER_TIME_SCALE"

// run serves until ctx ends or a first SIGTERM or SIGINT arrives on sigs
// (SIGHUP reloads the config), then stops within limits.shutdown_grace; a
// second signal then exits the process at once (exit 1). The listener and
// the adapters come from the config as it will run: with o.Lab, the file on
// top of the lab's config, so the lab starts first. The listener opens
// before the store.
func (s *server) run(ctx context.Context, sigs <-chan os.Signal, o setupOptions) error {
	log := s.log
	scale, err := s.schedulerScale()
	if err != nil {
		return err
	}
	cfg0, err := s.firstConfig(ctx, &o)
	defer func() {
		if o.Started != nil { // not handed over to setup
			o.Started.Close()
		}
	}()
	if err != nil {
		return err
	}
	chats, routes, rejects, err := s.openAdapters(cfg0)
	if err != nil {
		return err
	}
	// The listener opens before the store, so /healthz answers during a
	// slow start and a port in use fails at once.
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	httpDone, err := s.listen(httpCtx, cfg0.HTTP, routes, rejects)
	if err != nil {
		return err
	}

	o.Chats, o.Logger, o.Observer = chats, log, s.metrics
	o.Phase = func(what string) { s.phase.Store(&what) }
	o.Opened = func(st *store.Store, locker *leases.Leases) error {
		for _, a := range s.adapters {
			if k, ok := a.(storeKeeper); ok {
				k.keepIn(st, locker)
			}
		}
		return nil
	}
	e, err := setup(ctx, o)
	o.Started = nil // setup owns the lab now, and closed it on error
	if err != nil {
		return err
	}
	defer e.Close()
	s.env.Store(e)
	cfg := e.cfg
	for _, j := range e.app.Interrupted {
		log.Warn("job interrupted by the previous stop", "job", j.ID, "command", j.Command, "user", jobs.JobOwner(j), "service", j.Service)
	}
	s.loadSchedules(ctx, e.app.Store)

	// Adapters and the daily pruning run until the jobs are done.
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	s.runAdapters(bg, &wg, s.metrics.Inbound(e.app))
	// The scheduler and the watchdog act only on the holder of their store
	// lease: with two serve on one store, a schedule fires once and an
	// incident alerts once.
	svc, err := app.StartService(ctx, e.app, app.ServiceOptions{Logger: log, Retention: cfg.Store.Retention.D(), SchedulerScale: scale,
		Regressions: &report.RegressionPolicy{Pct: cfg.Alerts.RegressionPct, Runs: cfg.Alerts.RegressionRuns}})
	if err != nil {
		stopBG()
		wg.Wait()
		return err
	}
	s.serving.Store(true)
	log.Info("opsbot serving", "version", serve.BuildInfo(version, revision).Version, "adapters", platforms(s.adapters),
		"http", cfg.HTTP.Listen, "lab", o.Lab)

	signals := s.waitForStop(ctx, sigs, o, e)
	grace := e.app.CurrentConfig().Limits.ShutdownGrace.D()
	log.Info("stopping: no new commands; running jobs stop at a safe point within the shutdown grace",
		"grace", grace, "jobs", len(e.app.Active()))
	go s.exitOnSecondSignal(sigs, signals, e)
	err = svc.Stop(grace) // then the adapters, which showed the jobs' last states
	stopBG()
	wg.Wait()
	stopHTTP()
	if httpDone != nil {
		if herr := <-httpDone; herr != nil {
			log.Warn("stop http", "err", herr)
		}
	}
	if err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	log.Info("stopped")
	return nil
}

// schedulerScale is the scheduler's clock as SchedulerTimeScaleEnv sets it
// (logged as a warning), nil when the variable is not set.
func (s *server) schedulerScale() (*schedule.TimeScale, error) {
	v := os.Getenv(SchedulerTimeScaleEnv)
	if v == "" {
		return nil, nil
	}
	ts, err := schedule.ParseTimeScale(v, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SchedulerTimeScaleEnv, err)
	}
	s.log.Warn("the scheduler's clock runs fast: for tests only", "env", SchedulerTimeScaleEnv, "factor", ts.Factor, "epoch", ts.Epoch)
	return &ts, nil
}

// firstConfig loads the config as it will run, before the store opens: with
// o.Lab it starts the lab (setup waits until its services serve) and sets
// o.Started to it, and the file goes on top of the lab's config. A config
// that does not load is an error, with or without the lab; o.Started is
// then still the caller's to close.
func (s *server) firstConfig(ctx context.Context, o *setupOptions) (*config.Config, error) {
	if !o.Lab {
		return config.Load(o.ConfigPath)
	}
	o.Logger = s.log
	ls, err := startLabConfig(ctx, *o)
	if err != nil {
		return nil, err
	}
	o.Started = ls
	return loadConfig(o.ConfigPath, ls.cfg, nil)
}

// openAdapters builds the chat adapters cfg enables (and extraAdapters) into
// s.adapters. It returns their chats (counted by the metrics) by platform,
// the HTTP routes they serve, and the rejects counter their routes report
// to. An adapter this build lacks is an error.
func (s *server) openAdapters(cfg *config.Config) (map[string]bot.Chat, map[string]http.Handler, *serve.Rejects, error) {
	var factories []adapterFactory
	for _, name := range cfg.EnabledAdapters() {
		f := adapterFactories[name]
		if f == nil {
			return nil, nil, nil, fmt.Errorf("%s.enabled: this build of opsbot has no %s adapter yet", name, adapterNames[name])
		}
		factories = append(factories, f)
	}
	factories = append(factories, extraAdapters...)
	chats := map[string]bot.Chat{}
	routes := map[string]http.Handler{}
	rejects := serve.NewRejects(s.metrics, s.log)
	for _, f := range factories {
		a, err := f(cfg, s.log)
		if err != nil {
			return nil, nil, nil, err
		}
		s.adapters = append(s.adapters, a)
		chats[a.Platform()] = s.metrics.Chat(a.Platform(), a)
		if h, ok := a.(bot.HTTPAdapter); ok {
			for p, r := range h.Routes() {
				routes[p] = r
				if rj, ok := a.(bot.Rejecter); ok {
					_, path, _ := strings.Cut(p, " ")
					rj.CountRejects(func(reason string) { rejects.Reject(path, reason) })
				}
			}
		}
	}
	return chats, routes, rejects, nil
}

// listen opens the HTTP listener on http.listen and serves /healthz,
// /readyz, the metrics and routes on it until ctx ends, trusting
// http.trusted_proxies' X-Forwarded-For; the channel returned then gets
// Serve's error. With no http.listen it serves nothing (a nil channel),
// and routes to serve are an error.
func (s *server) listen(ctx context.Context, hc config.HTTP, routes map[string]http.Handler, rejects *serve.Rejects) (chan error, error) {
	addr := hc.Listen
	if addr == "" {
		if len(routes) > 0 {
			return nil, errors.New("http.listen: an enabled adapter receives deliveries over HTTP: set http.listen")
		}
		return nil, nil
	}
	h, err := serve.Handler(serve.Options{Ready: s.ready, Metrics: s.metrics, Routes: routes, Rejects: rejects,
		TrustedProxies: hc.TrustedPrefixes()})
	if err != nil {
		return nil, err
	}
	ln, err := serve.Listen(addr)
	if err != nil {
		return nil, err
	}
	ln = serve.LimitConns(ln, hc.TrustedPrefixes(), rejects)
	done := make(chan error, 1)
	go func() { done <- serve.Serve(ctx, ln, h, s.log) }()
	s.log.Info("http listening", "addr", ln.Addr().String())
	return done, nil
}

// runAdapters runs each adapter on ctx, delivering to in, until ctx ends,
// each in a goroutine of wg; an adapter whose Run gives up is logged and
// recorded in s.runErrs (readiness then fails).
func (s *server) runAdapters(ctx context.Context, wg *sync.WaitGroup, in bot.Inbound) {
	for _, a := range s.adapters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx, in); err != nil {
				s.runErrs.Store(a.Platform(), err)
				s.log.Error("chat adapter stopped", "platform", a.Platform(), "err", err)
			}
		}()
	}
}

// waitForStop waits until ctx ends or a signal other than SIGHUP arrives
// on sigs, reloading the config on each SIGHUP. It returns the signals
// counted: 1 for a stopping signal, 0 when ctx ended.
func (s *server) waitForStop(ctx context.Context, sigs <-chan os.Signal, o setupOptions, e *env) int {
	for {
		select {
		case <-ctx.Done():
			return 0
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.reload(o, e)
				continue
			}
			return 1
		}
	}
}

// exitOnSecondSignal, while the server stops, exits the process at once
// (exit 1) on the second stopping signal, counting from signals already
// received on sigs (main's context also counts the first); SIGHUP is
// ignored. It returns when sigs is closed.
func (s *server) exitOnSecondSignal(sigs <-chan os.Signal, signals int, e *env) {
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			continue
		}
		// main's context also counts the first signal: only a second
		// one received here is a second signal.
		if signals++; signals >= 2 {
			s.log.Warn("second signal: exiting now; the jobs still running are reported interrupted at the next start",
				"jobs", len(e.app.Active()))
			os.Exit(1)
		}
	}
}

// reload is SIGHUP: load the config again and apply it, or keep the old
// one and log why.
func (s *server) reload(o setupOptions, e *env) {
	cfg, err := loadConfig(o.ConfigPath, e.labCfg, s.log)
	if err != nil {
		s.log.Error("config reload refused: the config in effect stays", "config", o.ConfigPath, "err", err)
		return
	}
	for _, key := range app.RestartOnly(e.app.CurrentConfig(), cfg) {
		s.log.Warn("config reload: this change takes effect at the next restart", "key", key)
	}
	if err := e.reload(cfg); err != nil {
		s.log.Error("config reload refused: the config in effect stays", "config", o.ConfigPath, "err", err)
		return
	}
	// The config's schedules follow the file: one removed there is gone.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := schedule.SyncConfigSchedules(sctx, e.app, time.Now()); err != nil {
		s.log.Error("config reload: the schedules stay as they were", "config", o.ConfigPath, "err", err)
	}
	cancel()
	for _, a := range s.adapters {
		if r, ok := a.(bot.Reloader); ok {
			if err := r.Reload(cfg); err != nil {
				s.log.Error("config reload: the adapter keeps its settings", "platform", a.Platform(), "err", err)
			}
		}
	}
	s.log.Info("config reloaded", "config", o.ConfigPath, "services", cfg.ServiceNames(), "users", len(cfg.Auth.Users))
}

// loadSchedules sets each schedule's last success from the store.
func (s *server) loadSchedules(ctx context.Context, st *store.Store) {
	scs, err := st.Schedules(ctx)
	if err != nil {
		s.log.Warn("read schedules", "err", err)
		return
	}
	for _, sc := range scs {
		if sc.LastJobID == 0 {
			continue
		}
		if j, err := st.Job(ctx, sc.LastJobID); err == nil && j.Status == store.Succeeded {
			s.metrics.ScheduleSucceeded(sc.ID, j.EndedAt)
		}
	}
}

func platforms(as []bot.Adapter) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.Platform())
	}
	sort.Strings(out)
	return out
}

// newServeLogger logs to w as log.format and log.level say.
func newServeLogger(w io.Writer, c config.Log) (*slog.Logger, error) {
	level, err := config.LogLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// cmdHealth is `opsbot health [--url URL]`: exit 0 when URL answers 200
// within 5 s, for container health checks (images without curl).
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", stderr)
	url := fs.String("url", "http://127.0.0.1:9090/healthz", "`URL` to check")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usagef("--url: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("check %s: %w", *url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("check %s: %s: %s", *url, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "%s: %s", *url, body)
	return nil
}

// defaultConfig is where the packaged unit and the container read the config.
const defaultConfig = "/etc/opsbot/opsbot.yaml"

// cmdStore is `opsbot store backup [--config FILE] DEST`: a consistent copy
// of the store the config names, taken while opsbot runs.
func cmdStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const use = "usage: opsbot store backup [--config FILE] DEST\n       opsbot store copy --config FROM.yaml [--live] TO.yaml"
	if len(args) > 0 && args[0] == "copy" {
		return cmdStoreCopy(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("store backup", stderr)
	configPath := fs.String("config", defaultConfig, "config `FILE` naming store.path")
	if len(args) > 0 && wantsHelp(args[:1]) {
		// `opsbot store --help`: both subcommands.
		copyFS, _, _ := storeCopyFlags(stderr)
		return &helpRequest{text: helpText(fs) + "\n" + helpText(copyFS)}
	}
	if len(args) == 0 || args[0] != "backup" {
		return usagef(use)
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) > 1 { // flags after DEST
		if err := parseFlags(fs, rest[1:]); err != nil {
			return err
		}
		rest = append(rest[:1], fs.Args()...)
	}
	if len(rest) != 1 {
		return usagef(use)
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	dest := rest[0]
	if cfg.Store.Driver == config.StorePostgres {
		return fmt.Errorf("opsbot store backup copies a SQLite store; this config's store is PostgreSQL (%s): back it up with pg_dump (pg_dump --format=custom --file=%s DATABASE), or copy it into a SQLite store with opsbot store copy", bot.StoreConfig(cfg).Name(), dest)
	}
	t0 := time.Now()
	if err := store.Backup(ctx, cfg.Store.Path, dest); err != nil {
		return err
	}
	fi, err := os.Stat(dest)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s (%d bytes, %s)\n", cfg.Store.Path, dest, fi.Size(), time.Since(t0).Round(time.Millisecond))
	return nil
}

// cmdStoreCopy is `opsbot store copy --config FROM.yaml [--live] TO.yaml`:
// every job, event, bench result, schedule, incident, silence,
// confirmation, chat claim, audit entry and kv row of FROM's store into
// TO's empty store, either driver to either (store.Copy), as one
// consistent snapshot of FROM, then the counts. A source that live opsbot
// processes use is refused, naming their leases, unless --live: then the
// copy is FROM as of the cut, which it prints, and later writes are not
// copied.
// storeCopyFlags is `opsbot store copy`'s flag set: --config FROM.yaml and --live.
func storeCopyFlags(stderr io.Writer) (fs *flag.FlagSet, from *string, live *bool) {
	fs = newFlagSet("store copy", stderr)
	from = fs.String("config", "", "config `FROM.yaml` naming the store to copy from")
	live = fs.Bool("live", false, "copy a store in use: one consistent snapshot of it; what is written after the cut is not copied")
	return fs, from, live
}

func cmdStoreCopy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const use = "usage: opsbot store copy --config FROM.yaml [--live] TO.yaml"
	fs, from, live := storeCopyFlags(stderr)
	if wantsHelp(args) {
		return &helpRequest{text: helpText(fs)}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 1 && *from == "" {
		return usagef("%s (--config FROM.yaml names the store to copy from)", use)
	}
	if len(rest) > 1 { // flags after TO.yaml
		if err := parseFlags(fs, rest[1:]); err != nil {
			return err
		}
		rest = append(rest[:1], fs.Args()...)
	}
	if len(rest) != 1 || *from == "" {
		return usagef(use)
	}
	fromCfg, err := config.Load(*from)
	if err != nil {
		return err
	}
	toCfg, err := config.Load(rest[0])
	if err != nil {
		return err
	}
	src, err := store.OpenConfig(ctx, bot.StoreConfig(fromCfg))
	if err != nil {
		return fmt.Errorf("store copy: from %s: %w", *from, err)
	}
	defer src.Close()
	dst, err := store.OpenConfig(ctx, bot.StoreConfig(toCfg))
	if err != nil {
		return fmt.Errorf("store copy: to %s: %w", rest[0], err)
	}
	defer dst.Close()
	t0 := time.Now()
	if side, err := store.SideTables(ctx, src); err != nil {
		return err
	} else if len(side) > 0 {
		// The Matrix adapter's room state and keys: their tables are the
		// library's to make.
		if err := matrix.PrepareStore(ctx, dst); err != nil {
			return fmt.Errorf("store copy: %w", err)
		}
	}
	res, err := store.Copy(ctx, src, dst, store.CopyOptions{Live: *live})
	if errors.Is(err, store.ErrSourceLive) {
		return fmt.Errorf("%w.\nNothing was copied. Stop those opsbot processes first (a stopped one's leases count until they expire, "+
			"at most limits.lease_ttl), or copy the store as it is now with --live (one consistent snapshot; later writes are not copied)", err)
	}
	if err != nil {
		return err
	}
	printCopy(stdout, src, dst, res, time.Since(t0), *live)
	return nil
}

// printCopy prints what store copy did: the counts, and for --live the cut.
func printCopy(w io.Writer, src, dst *store.Store, res store.CopyResult, took time.Duration, live bool) {
	fmt.Fprintf(w, "copied %s to %s in %s:\n", src.Name(), dst.Name(), took.Round(time.Millisecond))
	for _, c := range res.Copied {
		fmt.Fprintf(w, "  %-16s %d\n", c.Table, c.Rows)
	}
	fmt.Fprintln(w, "not copied (what describes the processes that ran on the source, and tables the target lacks):")
	for _, c := range res.Skipped {
		fmt.Fprintf(w, "  %-16s %d\n", c.Table, c.Rows)
	}
	if !live {
		return
	}
	fmt.Fprintf(w, "live source: this is the source as of %s (one consistent snapshot); what was written to it after that is not copied.\n",
		res.Cut.UTC().Format("2006-01-02 15:04:05.000 UTC"))
	for _, l := range res.Live {
		fmt.Fprintf(w, "  lease %s was held by %s until %s\n", l.Key, l.Holder(), l.ExpiresAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
}
