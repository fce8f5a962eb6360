package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// cmdBench is `opsbot bench`: benchmark any OpenAI-compatible server and print
// the bench_serving-like table (or the JSON result with --json) on stdout,
// with a progress line on stderr while it runs. Exit 0 when the run succeeded,
// 1 when it failed (the result, if any, is still printed), 2 on bad usage.
// With --config and --service the result is stored in the config's store, beside
// the bot's own results for that service and settings; a run in which no
// request succeeded measured nothing and is not stored (stderr says so).
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs, a := benchFlags(stderr)
	if err := parseFlags(fs, args); err != nil {
		return 0, err
	}
	cfg, err := a.applyConfig(fs)
	if err != nil {
		return 0, err
	}
	dial, release, code, err := a.applyService(cfg)
	if err != nil {
		return code, err
	}
	defer release()
	if err := a.check(fs); err != nil {
		return 0, err
	}
	acc, k, settingsKey := acceptanceFor(ctx, a.url, a.engine, dial)
	p := newProgressWriter(stderr)
	res, err := bench.Run(ctx, bench.Options{
		URL: a.url, Dial: dial, Model: a.model, Chat: a.chat, Prompts: a.prompts, Concurrency: a.conc, InputLen: a.in, OutputLen: a.out,
		Rate: a.rate, Warmup: a.warmup, Timeout: a.timeout, Seed: 1, Acceptance: acc, DraftsPerStep: k,
		Settings: bench.Settings{Prompts: a.prompts, Concurrency: a.conc, InputLen: a.in, OutputLen: a.out, Rate: a.rate, Chat: a.chat},
		Progress: p.update,
	})
	p.finish()
	if res != nil {
		if perr := printBench(stdout, res, a.asJSON); perr != nil {
			return 1, perr
		}
	}
	if res != nil && a.service != "" && !res.Measured() {
		fmt.Fprintf(stderr, "opsbot bench: result not stored: no request succeeded, so nothing was measured (history keeps measured runs only)\n")
	} else if res != nil && a.service != "" {
		load := store.Load{Prompts: a.prompts, Concurrency: a.conc, InputLen: a.in, OutputLen: a.out}
		if serr := storeResult(ctx, cfg, a.service, settingsKey, load, res); serr != nil {
			fmt.Fprintf(stderr, "opsbot bench: result not stored: %v\n", serr)
		} else {
			fmt.Fprintf(stderr, "stored as a %s result of %s (%s)\n", settingsKey, a.service, bot.StoreConfig(cfg).Name())
		}
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// benchArgs are `opsbot bench`'s flags.
type benchArgs struct {
	url, model             string
	prompts, conc, in, out int
	rate                   float64
	warmup                 int
	timeout                time.Duration
	chat, asJSON           bool
	engine                 string
	configPath, service    string
}

// benchFlags is `opsbot bench`'s flag set, writing into the benchArgs it
// returns. The load defaults are the jobs' own (the config's bench section,
// applyConfig, else its defaults), so that results stored beside the jobs'
// compare.
func benchFlags(stderr io.Writer) (*flag.FlagSet, *benchArgs) {
	fs := newFlagSet("bench", stderr)
	a := &benchArgs{}
	fs.StringVar(&a.url, "url", "", "server `URL`, e.g. http://gpu1:30000 (required)")
	fs.StringVar(&a.model, "model", "", "model name (default: the first of /v1/models)")
	def := ops.DefaultBench()
	fs.IntVar(&a.prompts, "prompts", def.Prompts, "number of measured requests; with --config, the config's bench.prompts")
	fs.IntVar(&a.conc, "concurrency", def.Concurrency, "requests in flight at once; with --config, the config's bench.concurrency")
	fs.IntVar(&a.in, "in", def.InputLen, "prompt length in tokens; with --config, the config's bench.input_len")
	fs.IntVar(&a.out, "out", def.OutputLen, "output length in tokens, ignore_eos; with --config, the config's bench.output_len")
	fs.Float64Var(&a.rate, "rate", 0, "requests per second, Poisson arrivals (0: all at once)")
	fs.IntVar(&a.warmup, "warmup", 0, "warm-up requests, excluded from the result")
	fs.DurationVar(&a.timeout, "timeout", 10*time.Minute, "limit per request (0: none)")
	fs.BoolVar(&a.chat, "chat", false, "use /v1/chat/completions instead of /v1/completions")
	fs.BoolVar(&a.asJSON, "json", false, "print the result as JSON")
	fs.StringVar(&a.engine, "engine", "auto", "engine for acceptance: sglang, vllm or auto (asks /server_info)")
	fs.StringVar(&a.configPath, "config", "", "opsbot config `FILE`: with --service, store the result (and take the URL from it)")
	fs.StringVar(&a.service, "service", "", "service `NAME` of the config the server belongs to")
	return fs, a
}

// applyConfig loads --config when given (nil when not) and takes from its
// bench section the load flags not given on the command line.
func (a *benchArgs) applyConfig(fs *flag.FlagSet) (*config.Config, error) {
	if a.configPath == "" {
		return nil, nil
	}
	cfg, err := config.Load(a.configPath)
	if err != nil {
		return nil, err
	}
	for name, v := range map[string]struct {
		p   *int
		def int
	}{"prompts": {&a.prompts, cfg.Bench.Prompts}, "concurrency": {&a.conc, cfg.Bench.Concurrency},
		"in": {&a.in, cfg.Bench.InputLen}, "out": {&a.out, cfg.Bench.OutputLen}} {
		if !flagGiven(fs, name) && v.def > 0 {
			*v.p = v.def
		}
	}
	return cfg, nil
}

// applyService takes from --service's section of cfg the URL (unless --url
// is given) and the engine (for --engine auto). A service reached through
// SSH (via_ssh) is dialled as jobs do: the dial function returned goes
// through the SSH connection to its host, held until release is called
// (release is never nil on success). A usage error has code 0; failing to
// reach the host, code 1.
func (a *benchArgs) applyService(cfg *config.Config) (dial engine.DialFunc, release func(), code int, err error) {
	release = func() {}
	if a.service == "" {
		return nil, release, 0, nil
	}
	if cfg == nil {
		return nil, nil, 0, usagef("--service needs --config: the service is looked up in the config")
	}
	in, ok := cfg.Instance(a.service)
	if !ok {
		if reps := cfg.ReplicasOf(a.service); len(reps) > 0 {
			return nil, nil, 0, usagef("--service %s has replicas: name one (%s)", a.service, strings.Join(reps, ", "))
		}
		return nil, nil, 0, usagef("--service %q is not in %s", a.service, a.configPath)
	}
	sc := in.Service
	if a.url == "" {
		a.url = sc.URL
		if sc.ViaSSH {
			// Reach it as jobs do: through the SSH connection to its host.
			rb, err := newRunbook(cfg, bot.BackendDeps{}, nil)
			if err != nil {
				return nil, nil, 1, fmt.Errorf("reach %s through SSH (services.%s.via_ssh): %w", a.service, a.service, err)
			}
			release = func() { rb.Close() }
			if dial, err = rb.EngineDial(a.service); err != nil {
				rb.Close()
				return nil, nil, 1, err
			}
		}
	}
	if a.engine == "auto" && sc.Engine != "" {
		a.engine = sc.Engine
	}
	return dial, release, 0, nil
}

// check refuses arguments and flag values out of range, as usage errors.
func (a *benchArgs) check(fs *flag.FlagSet) error {
	switch {
	case fs.NArg() > 0:
		return usagef("unexpected arguments: %v", fs.Args())
	case a.engine != "auto" && a.engine != "sglang" && a.engine != "vllm":
		return usagef("--engine must be sglang, vllm or auto, got %q", a.engine)
	case a.url == "":
		return usagef("--url is required, e.g. --url http://gpu1:30000")
	case a.prompts < 1:
		return usagef("--prompts must be at least 1, got %d", a.prompts)
	case a.conc < 1:
		return usagef("--concurrency must be at least 1, got %d", a.conc)
	case a.in < 1:
		return usagef("--in must be at least 1 token, got %d", a.in)
	case a.out < 1:
		return usagef("--out must be at least 1 token, got %d", a.out)
	case a.rate < 0 || math.IsNaN(a.rate):
		return usagef("--rate must be 0 (all at once) or more, got %v", a.rate)
	case a.warmup < 0:
		return usagef("--warmup must be 0 or more, got %d", a.warmup)
	case a.timeout < 0:
		return usagef("--timeout must be 0 (none) or more, got %s", a.timeout)
	}
	if pu, err := url.Parse(a.url); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return usagef("--url %q: want http://HOST:PORT or https://HOST:PORT", a.url)
	}
	return nil
}

// printBench prints res on w: the bench_serving-like table, or with asJSON
// the result as indented JSON.
func printBench(w io.Writer, res *bench.Result, asJSON bool) error {
	if !asJSON {
		fmt.Fprint(w, res.Table())
		return nil
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	fmt.Fprintf(w, "%s\n", b)
	return nil
}

// acceptanceFor picks how acceptance is measured over plain HTTP: SGLang from
// /server_info after a /flush_cache at the window's start, falling back to
// figures that are not over the window, named as such (the decode log needs
// the host, which only jobs have); vLLM from /metrics counter deltas. It also returns k (drafts per
// step, 0 when the engine says) and the settings key results are stored under. dial reaches
// base (nil: directly).
func acceptanceFor(ctx context.Context, base, engineName string, dial engine.DialFunc) (bench.Acceptance, int, string) {
	c := engine.NewVia(base, dial)
	info, err := c.ServerInfo(ctx)
	if engineName == "sglang" || (engineName == "auto" && err == nil) {
		if err != nil {
			return bench.SGLangAcceptance(c, nil), 0, "engine=sglang"
		}
		k := bench.DraftsPerStep(false, info.Steps, info.TopK, info.DraftTokens)
		return bench.SGLangAcceptance(c, nil), k, report.SettingsKey(&ops.Spec{Steps: info.Steps, TopK: info.TopK, DraftTokens: info.DraftTokens})
	}
	return bench.VLLMAcceptance(c), 0, "engine=vllm"
}

// storeResult adds res to service's history, with no job: history shows it
// as "opsbot bench".
func storeResult(ctx context.Context, cfg *config.Config, service, settings string, load store.Load, res *bench.Result) error {
	st, err := store.OpenConfig(ctx, bot.StoreConfig(cfg))
	if err != nil {
		return err
	}
	defer st.Close()
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = st.AddBenchResult(ctx, store.BenchResult{Service: service, Settings: settings, OutputTokS: res.OutputTokS,
		PerStreamTokS: res.PerStreamTokS, AcceptLen: res.AcceptLen, AcceptRate: res.AcceptRate,
		RequestsOK: res.RequestsOK, RequestsFailed: res.RequestsFailed, Raw: raw,
		Concurrency: load.Concurrency, Prompts: load.Prompts, InputLen: load.InputLen, OutputLen: load.OutputLen})
	return err
}

// progressWriter shows bench progress on stderr: rewritten in place on a
// terminal, else one line every few seconds.
type progressWriter struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	last  time.Time
	drawn bool
}

func newProgressWriter(w io.Writer) *progressWriter {
	f, ok := w.(*os.File)
	return &progressWriter{w: w, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progressWriter) update(pr bench.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := bench.FormatProgress(pr)
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.drawn = true
		return
	}
	if pr.Final || time.Since(p.last) >= 5*time.Second {
		p.last = time.Now()
		fmt.Fprintln(p.w, line)
	}
}

func (p *progressWriter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}
