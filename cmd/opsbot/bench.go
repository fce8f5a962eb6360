package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/opsbot/opsbot/bot"
	"github.com/opsbot/opsbot/config"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/ops/engine"
	"github.com/opsbot/opsbot/store"
)

// cmdBench is `opsbot bench`: benchmark any OpenAI-compatible server and print
// the bench_serving-like table (or the JSON result with --json) on stdout,
// with a progress line on stderr while it runs. Exit 0 when the run succeeded,
// 1 when it failed (the result, if any, is still printed), 2 on bad usage.
// With --config and --service the result is stored in the config's store, beside
// the bot's own results for that service and settings.
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlagSet("bench", stderr)
	u := fs.String("url", "", "server `URL`, e.g. http://gpu1:30000 (required)")
	model := fs.String("model", "", "model name (default: the first of /v1/models)")
	// The load defaults are the jobs' own (the config's bench section, else
	// its defaults), so that results stored beside the jobs' compare.
	def := ops.DefaultBench()
	prompts := fs.Int("prompts", def.Prompts, "number of measured requests (default: the config's bench.prompts)")
	conc := fs.Int("concurrency", def.Concurrency, "requests in flight at once (default: the config's bench.concurrency)")
	in := fs.Int("in", def.InputLen, "prompt length in tokens (default: the config's bench.input_len)")
	out := fs.Int("out", def.OutputLen, "output length in tokens, ignore_eos (default: the config's bench.output_len)")
	rate := fs.Float64("rate", 0, "requests per second, Poisson arrivals (0: all at once)")
	warmup := fs.Int("warmup", 0, "warm-up requests, excluded from the result")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit per request (0: none)")
	chat := fs.Bool("chat", false, "use /v1/chat/completions instead of /v1/completions")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	engineName := fs.String("engine", "auto", "engine for acceptance: sglang, vllm or auto (asks /server_info)")
	configPath := fs.String("config", "", "opsbot config `FILE`: with --service, store the result (and take the URL from it)")
	service := fs.String("service", "", "service `NAME` of the config the server belongs to")
	if err := parseFlags(fs, args); err != nil {
		return 0, err
	}
	var cfg *config.Config
	if *configPath != "" {
		c, err := config.Load(*configPath)
		if err != nil {
			return 0, err
		}
		cfg = c
		for name, v := range map[string]struct {
			p   *int
			def int
		}{"prompts": {prompts, cfg.Bench.Prompts}, "concurrency": {conc, cfg.Bench.Concurrency},
			"in": {in, cfg.Bench.InputLen}, "out": {out, cfg.Bench.OutputLen}} {
			if !flagGiven(fs, name) && v.def > 0 {
				*v.p = v.def
			}
		}
	}
	var dial engine.DialFunc
	if *service != "" {
		if cfg == nil {
			return 0, usagef("--service needs --config: the service is looked up in the config")
		}
		sc, ok := cfg.Services[*service]
		if !ok {
			return 0, usagef("--service %q is not in %s", *service, *configPath)
		}
		if *u == "" {
			*u = sc.URL
			if sc.ViaSSH {
				// Reach it as jobs do: through the SSH connection to its host.
				rb, err := newRunbook(cfg, bot.BackendDeps{}, nil)
				if err != nil {
					return 1, fmt.Errorf("reach %s through SSH (services.%s.via_ssh): %w", *service, *service, err)
				}
				defer rb.Close()
				if dial, err = rb.EngineDial(*service); err != nil {
					return 1, err
				}
			}
		}
		if *engineName == "auto" && sc.Engine != "" {
			*engineName = sc.Engine
		}
	}
	switch {
	case fs.NArg() > 0:
		return 0, usagef("unexpected arguments: %v", fs.Args())
	case *engineName != "auto" && *engineName != "sglang" && *engineName != "vllm":
		return 0, usagef("--engine must be sglang, vllm or auto, got %q", *engineName)
	case *u == "":
		return 0, usagef("--url is required, e.g. --url http://gpu1:30000")
	case *prompts < 1:
		return 0, usagef("--prompts must be at least 1, got %d", *prompts)
	case *conc < 1:
		return 0, usagef("--concurrency must be at least 1, got %d", *conc)
	case *in < 1:
		return 0, usagef("--in must be at least 1 token, got %d", *in)
	case *out < 1:
		return 0, usagef("--out must be at least 1 token, got %d", *out)
	case *rate < 0 || *rate != *rate:
		return 0, usagef("--rate must be 0 (all at once) or more, got %v", *rate)
	case *warmup < 0:
		return 0, usagef("--warmup must be 0 or more, got %d", *warmup)
	case *timeout < 0:
		return 0, usagef("--timeout must be 0 (none) or more, got %s", *timeout)
	}
	if pu, err := url.Parse(*u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return 0, usagef("--url %q: want http://HOST:PORT or https://HOST:PORT", *u)
	}
	acc, k, settingsKey := acceptanceFor(ctx, *u, *engineName, dial)
	p := newProgressWriter(stderr)
	res, err := bench.Run(ctx, bench.Options{
		URL: *u, Dial: dial, Model: *model, Chat: *chat, Prompts: *prompts, Concurrency: *conc, InputLen: *in, OutputLen: *out,
		Rate: *rate, Warmup: *warmup, Timeout: *timeout, Seed: 1, Acceptance: acc, DraftsPerStep: k,
		Settings: bench.Settings{Prompts: *prompts, Concurrency: *conc, InputLen: *in, OutputLen: *out, Rate: *rate, Chat: *chat},
		Progress: p.update,
	})
	p.finish()
	if res != nil {
		if *asJSON {
			b, merr := json.MarshalIndent(res, "", "  ")
			if merr != nil {
				return 1, fmt.Errorf("encode result: %w", merr)
			}
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			fmt.Fprint(stdout, res.Table())
		}
	}
	if res != nil && *service != "" {
		load := store.Load{Prompts: *prompts, Concurrency: *conc, InputLen: *in, OutputLen: *out}
		if serr := storeResult(ctx, cfg, *service, settingsKey, load, res); serr != nil {
			fmt.Fprintf(stderr, "opsbot bench: result not stored: %v\n", serr)
		} else {
			fmt.Fprintf(stderr, "stored as a %s result of %s (%s)\n", settingsKey, *service, bot.StoreConfig(cfg).Name())
		}
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
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
		return bench.SGLangAcceptance(c, nil), k, bot.SettingsKey(&ops.Spec{Steps: info.Steps, TopK: info.TopK, DraftTokens: info.DraftTokens})
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
