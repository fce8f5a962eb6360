package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"time"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/lab"
	"github.com/opsbot/opsbot/leases"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// setupOptions say where the bot's hosts are: a config file or an in-process lab.
type setupOptions struct {
	// ConfigPath is the config file; with Lab, it is read on top of the
	// lab's config and must not set what the lab supplies (config.LabKeys).
	ConfigPath string
	Lab        bool
	LabFaults  string
	LabUnit    string
	// LabReplicas, with Lab, runs qwen as that many replicas behind the
	// lab's router (lab.Options.Replicas; 0: qwen and coder).
	LabReplicas int
	Chats       map[string]bot.Chat
	Logger      *slog.Logger
	// Observer, when set, is told of every job and step (serve's metrics).
	Observer jobs.Observer
	// Opened, when set, is bot.AppOptions.Opened: serve hands the adapters
	// that keep state in the store the store and the runtime's locker.
	Opened func(st *store.Store, locker *leases.Leases) error
	// Started, with Lab, is the lab startLabConfig already started (serve
	// needs its config before setup); setup then owns it. nil: setup starts one.
	Started *labStart
	// LabLater, with Lab: setup does not wait for the lab's services to
	// serve; env.labReady does, once something needs them (`opsbot run`
	// parses its commands first, and `jobs` or `help` never wait).
	LabLater bool
	// Phase, when set, is told what setup waits for now ("booting the lab
	// ...", "opening the store"), for serve's /readyz.
	Phase func(string)
}

// labStart is an in-process lab and the config that reaches it.
type labStart struct {
	lab *lab.Lab
	dir string // the lab's config, key and store; removed by Close
	cfg string // the lab's config file, in dir
}

// Close stops the lab and removes its files.
func (s *labStart) Close() {
	s.lab.Close()
	os.RemoveAll(s.dir)
}

// startLabConfig starts the lab with o's faults and unit and writes the
// config that reaches it; the config file at o.ConfigPath, if any, must not
// set what the lab supplies (checked before the lab starts). It does not
// wait until the lab's services serve.
func startLabConfig(ctx context.Context, o setupOptions) (*labStart, error) {
	if o.ConfigPath != "" {
		if err := config.CheckNotSet(o.ConfigPath, config.LabKeys); err != nil {
			return nil, err
		}
	}
	l, err := startLab(ctx, o.LabFaults, o.LabUnit, "", "", o.LabReplicas, o.Logger)
	if err != nil {
		return nil, err
	}
	s := &labStart{lab: l}
	if s.dir, err = os.MkdirTemp("", "opsbot-run-"); err != nil {
		l.Close()
		return nil, fmt.Errorf("lab config dir: %w", err)
	}
	if s.cfg, err = l.WriteConfig(s.dir); err != nil {
		s.Close()
		return nil, fmt.Errorf("write lab config: %w", err)
	}
	return s, nil
}

// env is an assembled bot (and the lab it runs on, if any).
type env struct {
	lab      *lab.Lab
	labDir   string          // the lab's config, key and store; removed by Close
	labCfg   string          // the lab's config file, in labDir
	runbooks jobs.Runbooks   // the Backend: the runbook of the config in effect
	deps     bot.BackendDeps // what the runbooks take from the store: node leases, job history
	app      *bot.App
	cfg      *config.Config
	log      *slog.Logger
}

// reload applies cfg as `opsbot serve` does on SIGHUP (jobs.Runbooks.Reload).
func (e *env) reload(cfg *config.Config) error {
	err := e.runbooks.Reload(e.app, cfg, func(cfg *config.Config) (*ops.Runbook, error) { return newRunbook(cfg, e.deps, e.log) })
	if err == nil {
		e.cfg = cfg
	}
	return err
}

func (e *env) Close() {
	if e.app != nil {
		e.app.Close()
	}
	e.runbooks.Close()
	if e.lab != nil {
		e.lab.Close()
	}
	if e.labDir != "" {
		os.RemoveAll(e.labDir)
	}
}

func setup(ctx context.Context, o setupOptions) (_ *env, err error) {
	e := &env{log: o.Logger}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	cfgPath := o.ConfigPath
	labCfg := ""
	switch {
	case !o.Lab && (o.LabFaults != "" || o.LabUnit != "" || o.LabReplicas != 0):
		return nil, usagef("--lab-faults, --lab-unit and --lab-replicas need --lab")
	case o.Lab:
		ls := o.Started
		if ls == nil {
			if ls, err = startLabConfig(ctx, o); err != nil {
				return nil, err
			}
		}
		e.lab, e.labDir, e.labCfg = ls.lab, ls.dir, ls.cfg
		labCfg = ls.cfg
		if !o.LabLater {
			phase(o, "booting the lab: its engines load")
			if err := e.labReady(ctx); err != nil {
				return nil, err
			}
		}
	case cfgPath == "":
		return nil, usagef("say where the hosts are: --config FILE, or --lab for the simulated GPU host")
	}
	cfg, err := loadConfig(cfgPath, labCfg, o.Logger)
	if err != nil {
		return nil, err
	}
	e.cfg = cfg
	phase(o, "opening the store")
	// The runbook's pipelines hold nodes through the store's leases, so it
	// is built once the app has opened the store.
	newBackend := func(deps bot.BackendDeps) (jobs.Backend, error) {
		// The lab is new at every run; a store of --config FILE keeps
		// the jobs of the labs before it.
		deps.NewHosts = o.Lab
		e.deps = deps
		if len(cfg.Hosts) == 0 {
			return &e.runbooks, nil // nothing to reach yet; a reload may add hosts
		}
		rb, err := newRunbook(cfg, deps, o.Logger)
		if err != nil {
			return nil, err
		}
		e.runbooks.Set(rb)
		return &e.runbooks, nil
	}
	app, err := bot.NewApp(ctx, cfg, bot.AppOptions{NewBackend: newBackend, Chats: o.Chats, Logger: o.Logger,
		Observer: o.Observer, Opened: o.Opened})
	if err != nil {
		return nil, err
	}
	e.app = app
	return e, nil
}

// phase tells o.Phase, when set, what setup waits for now.
func phase(o setupOptions, what string) {
	if o.Phase != nil {
		o.Phase(what)
	}
}

// labReady waits until every service of the lab (if any) serves, as a real
// host would before a change; at most a minute each. Once they have, it
// returns at once.
func (e *env) labReady(ctx context.Context) error {
	if e.lab == nil {
		return nil
	}
	for _, svc := range e.lab.Topology().Services {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := e.lab.WaitReady(wctx, svc.Name)
		cancel()
		if err != nil {
			return fmt.Errorf("lab service %s did not come up: %w", svc.Name, err)
		}
	}
	return nil
}

// loadConfig loads the config: the file at path, the lab's config at
// labPath, or, with both, the file on top of the lab's, which supplies
// config.LabKeys (the hosts and services) and what the file leaves out.
// The config's warnings go to log (when not nil).
func loadConfig(path, labPath string, log *slog.Logger) (*config.Config, error) {
	var cfg *config.Config
	var err error
	switch {
	case labPath == "":
		cfg, err = config.Load(path)
	case path == "":
		cfg, err = config.Load(labPath)
	default:
		var base []byte
		if base, err = os.ReadFile(labPath); err != nil {
			return nil, fmt.Errorf("read lab config: %w", err)
		}
		cfg, err = config.LoadOver(path, base, config.LabKeys)
	}
	if err == nil && log != nil {
		for _, w := range cfg.Warnings {
			log.Warn(w)
		}
	}
	return cfg, err
}

// startLab starts the simulated hosts with the given faults and unit file,
// qwen as replicas replicas behind the lab's router when replicas > 0.
func startLab(ctx context.Context, faults, unitFile, engine, dir string, replicas int, log *slog.Logger) (*lab.Lab, error) {
	fl, err := lab.ParseFaults(faults)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if replicas != 0 && (replicas < 2 || replicas > 8) {
		return nil, usagef("replicas must be 2 to 8, got %d", replicas)
	}
	opts := lab.Options{Faults: fl, Engine: engine, Dir: dir, Replicas: replicas, Logger: log}
	if unitFile != "" {
		b, err := os.ReadFile(unitFile)
		if err != nil {
			return nil, fmt.Errorf("read unit: %w", err)
		}
		opts.UnitText = string(b)
	}
	l, err := lab.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start lab: %w", err)
	}
	return l, nil
}

// newRunbook builds the ops layer from the config; its mutating windows hold
// nodes with deps.Nodes, and mtp undo reads the job history deps.Changes.
func newRunbook(cfg *config.Config, deps bot.BackendDeps, log *slog.Logger) (*ops.Runbook, error) {
	return ops.New(opsConfig(cfg, deps, log))
}

// opsConfig is the ops layer's configuration from the config file's.
func opsConfig(cfg *config.Config, deps bot.BackendDeps, log *slog.Logger) ops.Config {
	oc := ops.Config{
		KeyFile:        cfg.SSH.KeyFile,
		KnownHosts:     cfg.SSH.KnownHosts,
		ConnectTimeout: cfg.SSH.ConnectTimeout.D(),
		KeepAlive:      cfg.SSH.KeepAlive.D(),
		Hosts:          map[string]ops.HostConfig{},
		Services:       cfg.OpsServices(),
		Rollout:        cfg.OpsRollout(),
		Bench: ops.BenchDefaults{Prompts: cfg.Bench.Prompts, Concurrency: cfg.Bench.Concurrency,
			InputLen: cfg.Bench.InputLen, OutputLen: cfg.Bench.OutputLen},
		MaxSteps:      cfg.Limits.MaxSteps,
		StrandedAfter: cfg.Limits.StrandedAfter.D(),
		SweepMetric:   cfg.Sweep.Metric,
		NodeLocks:     deps.Nodes,
		Changes:       deps.Changes,
		RebuiltAfter: func() int64 {
			if deps.NewHosts {
				return deps.LastJob
			}
			return 0
		}(),
		Logger: log,
	}
	for name, h := range cfg.Hosts {
		oc.Hosts[name] = ops.HostConfig{Addr: h.Addr, User: h.User, Jump: h.Jump, Prefix: h.Prefix}
	}
	return oc
}

func defaultUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "operator"
}
