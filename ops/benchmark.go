package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/ops/systemd"
	"github.com/opsbot/opsbot/ops/unit"
)

// withBenchDefaults fills the knobs a command left at 0 from the configured defaults.
func (r *Runbook) withBenchDefaults(p BenchParams) BenchParams {
	d := r.cfg.Bench
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	return BenchParams{Prompts: pick(p.Prompts, d.Prompts), Concurrency: pick(p.Concurrency, d.Concurrency),
		InputLen: pick(p.InputLen, d.InputLen), OutputLen: pick(p.OutputLen, d.OutputLen)}
}

// benchmark runs the load generator against the service and stores its result in
// res.Bench (with the settings it ran under). It returns the one-line figure
// for summaries. Acceptance is measured over the benchmark window: vLLM from
// /metrics counter deltas; SGLang from /server_info after a /flush_cache at
// the window's start, or, when the engine cannot flush (another client's
// requests are running), from the decode log lines the unit's journal got
// during the run, read over SSH (bench.SGLangAcceptance). A fallback that is
// not over the window is named as such in the line.
func (r *Runbook) benchmark(ctx context.Context, t *target, p BenchParams, res *Result, rep Reporter) (string, error) {
	p = r.withBenchDefaults(p)
	st := begin(rep, "benchmark", "%d prompts at concurrency %d, %d tokens in, %d out", p.Prompts, p.Concurrency, p.InputLen, p.OutputLen)
	if res.Spec == nil {
		return "", st.fail(errors.New("no speculative settings known for this service"))
	}
	k := bench.DraftsPerStep(res.Spec.Engine == "vllm", res.Spec.Steps, res.Spec.TopK, res.Spec.DraftTokens)
	if res.Spec.Adaptive != "" || res.Spec.BatchTable != "" {
		// Per load the drafts per step vary with the batch: vLLM's counters
		// measure them over the window; SGLang's logs do not.
		k = 0
	}
	var acc bench.Acceptance
	off := res.Spec.Steps == 0 && res.Spec.Adaptive == "" && res.Spec.BatchTable == ""
	switch {
	case off:
		// No speculative decoding: no drafts to accept.
	case engineOf(t, res) == unit.VLLM:
		acc = bench.VLLMAcceptance(t.eng)
	default:
		acc = bench.SGLangAcceptance(t.eng, func(ctx context.Context, since time.Time) ([]string, error) {
			return t.unit.Journal(ctx, systemd.JournalQuery{Since: since.Add(-time.Second), Lines: 20000})
		})
	}
	settings := bench.Settings{Steps: res.Spec.Steps, TopK: res.Spec.TopK, DraftTokens: res.Spec.DraftTokens,
		Prompts: p.Prompts, Concurrency: p.Concurrency, InputLen: p.InputLen, OutputLen: p.OutputLen}
	var running func(context.Context) (int, bool)
	if res.Spec.Adaptive != "" && engineOf(t, res) != unit.VLLM {
		// SGLang chooses the steps per batch: ask it which it runs.
		running = func(ctx context.Context) (int, bool) {
			info, err := t.eng.ServerInfo(ctx)
			return info.RunningSteps, err == nil && info.HasRunningSteps
		}
	}
	lastProgress := time.Time{}
	out, err := bench.Run(ctx, bench.Options{
		URL: t.cfg.URL, Dial: t.dial, Prompts: p.Prompts, Concurrency: p.Concurrency, InputLen: p.InputLen, OutputLen: p.OutputLen,
		Timeout: 10 * time.Minute, Acceptance: acc, DraftsPerStep: k, Settings: settings, RunningSteps: running,
		Progress: func(pr bench.Progress) {
			if time.Since(lastProgress) >= 2*time.Second {
				lastProgress = time.Now()
				st.progress("%s", bench.FormatProgress(pr))
			}
		},
	})
	if out != nil {
		out.Requests = nil // per-request rows stay out of the job result
		out.Concurrency = p.Concurrency
		res.Bench = out
	}
	if err != nil {
		res.AddIncident(IncidentBenchFailed)
		return "", st.fail(fmt.Errorf("benchmark %s: %w", t.cfg.URL, err))
	}
	line := BenchLine(out)
	if off {
		line = fmt.Sprintf("%s tok/s (%s per stream), no speculative decoding", figureText(out.OutputTokS, "%.1f"), figureText(out.PerStreamTokS, "%.1f"))
	}
	for _, e := range out.Errors {
		if !acceptanceError(out, e) {
			st.warn("%s", e)
		}
	}
	st.done("%s", line)
	return line, nil
}

// BenchLine is a benchmark's figures in one line: "281.3 tok/s (93.8 per
// stream), accept len 3.05, acceptance 68%", each figure not measured as
// "—" with the reason once, and a fallback accept source named.
func BenchLine(out *bench.Result) string {
	line := fmt.Sprintf("%s tok/s (%s per stream)", figureText(out.OutputTokS, "%.1f"), figureText(out.PerStreamTokS, "%.1f"))
	switch {
	case bench.KnownAcceptLen(out.AcceptLen) && bench.Known(out.AcceptRate):
		line += fmt.Sprintf(", accept len %.2f, acceptance %.0f%%", out.AcceptLen, out.AcceptRate*100)
	case bench.KnownAcceptLen(out.AcceptLen):
		line += fmt.Sprintf(", accept len %.2f, acceptance %s (%s)", out.AcceptLen, bench.Dash, out.AcceptUnknown)
	case out.AcceptUnknown != "":
		line += fmt.Sprintf(", accept len %s (%s)", bench.Dash, out.AcceptUnknown)
	default:
		line += ", acceptance not measured"
	}
	if bench.KnownAcceptLen(out.AcceptLen) && !out.AcceptOverWindow && out.AcceptSource != "" {
		line += " (" + out.AcceptSource + ")" // a fallback's source says it is not over the window
	}
	return line
}

// figureText is f in format, or "—" when it was not measured.
func figureText(f float64, format string) string {
	if !bench.Known(f) {
		return bench.Dash
	}
	return fmt.Sprintf(format, f)
}

// acceptanceError reports whether e, one of out.Errors, is the acceptance
// measure's, whose cause out.AcceptCause names: the benchmark's line says
// it, and the report merges it with the others of its cause (one line per
// cause, with what to change), so it is not warned once per benchmark.
func acceptanceError(out *bench.Result, e string) bool {
	switch out.AcceptCause {
	case bench.CauseShortRun:
		return strings.HasPrefix(e, "acceptance: ")
	case bench.CauseDraftsUnknown:
		return strings.HasPrefix(e, "accept_rate not computed")
	}
	return false
}

// Bench is `bench`: benchmark the service as it runs now.
func (r *Runbook) Bench(ctx context.Context, service string, p BenchParams, dryRun bool, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if err := r.readSpec(ctx, t, res, rep); err != nil {
		return res, err
	}
	if dryRun {
		p = r.withBenchDefaults(p)
		res.Summary = fmt.Sprintf("dry run: would benchmark %s with %d prompts at concurrency %d (%d in, %d out)",
			service, p.Prompts, p.Concurrency, p.InputLen, p.OutputLen)
		return res, nil
	}
	if err := r.checkReach(ctx, t); err != nil {
		return res, err
	}
	ph, _ := t.eng.Probe(ctx)
	if ph.String() != "ready" {
		return res, fmt.Errorf("%s is not serving (%s): start it first (`svc start %s`)", service, phaseText(ph), service)
	}
	if err := r.verify(ctx, t, res, rep); err != nil {
		return res, err
	}
	line, err := r.benchmark(ctx, t, p, res, rep)
	if err != nil {
		return res, err
	}
	res.Summary = fmt.Sprintf("%s at %s: %s", service, PointOf(res.Bench, res.Spec).Ran(), line)
	return res, nil
}

// prefixed prefixes every step name of rep's events.
func prefixed(rep Reporter, prefix string) Reporter {
	return ReporterFunc(func(e Event) {
		e.Step = prefix + e.Step
		rep.Report(e)
	})
}

// engineOf is the engine the service runs: as its unit's command line says
// when the pipeline read it, else as the config says.
func engineOf(t *target, res *Result) string {
	if res.Spec != nil && res.Spec.Engine != "" {
		return res.Spec.Engine
	}
	return t.cfg.Engine
}
