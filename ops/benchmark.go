package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/ops/systemd"
	"github.com/opsbot/opsbot/ops/unit"
)

// withBenchDefaults fills the knobs a command left at 0 from the configured defaults.
func (r *Runbook) withBenchDefaults(p commands.BenchParams) commands.BenchParams {
	d := r.cfg.Bench
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	return commands.BenchParams{Prompts: pick(p.Prompts, d.Prompts), Concurrency: pick(p.Concurrency, d.Concurrency),
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
func (r *Runbook) benchmark(ctx context.Context, t *target, p commands.BenchParams, res *Result, rep Reporter) (string, error) {
	p = r.withBenchDefaults(p)
	st := begin(rep, "benchmark", "%d prompts at concurrency %d, %d tokens in, %d out", p.Prompts, p.Concurrency, p.InputLen, p.OutputLen)
	if res.Spec == nil {
		return "", st.fail(errors.New("no speculative settings known for this service"))
	}
	k := res.Spec.Steps
	if res.Spec.Engine != "vllm" && res.Spec.TopK > 1 && res.Spec.DraftTokens > 0 {
		k = res.Spec.DraftTokens - 1
	}
	var acc bench.Acceptance
	if engineOf(t, res) == unit.VLLM {
		acc = bench.VLLMAcceptance(t.eng)
	} else {
		acc = bench.SGLangAcceptance(t.eng, func(ctx context.Context, since time.Time) ([]string, error) {
			return t.unit.Journal(ctx, systemd.JournalQuery{Since: since.Add(-time.Second), Lines: 20000})
		})
	}
	settings := map[string]any{"steps": res.Spec.Steps, "topk": res.Spec.TopK, "draft_tokens": res.Spec.DraftTokens,
		"prompts": p.Prompts, "concurrency": p.Concurrency, "input_len": p.InputLen, "output_len": p.OutputLen}
	lastProgress := time.Time{}
	out, err := bench.Run(ctx, bench.Options{
		URL: t.cfg.URL, Prompts: p.Prompts, Concurrency: p.Concurrency, InputLen: p.InputLen, OutputLen: p.OutputLen,
		Timeout: 10 * time.Minute, Acceptance: acc, DraftsPerStep: k, Settings: settings,
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
	line := fmt.Sprintf("%.1f tok/s (%.1f per stream), accept len %.2f, acceptance %.0f%%",
		out.OutputTokS, out.PerStreamTokS, out.AcceptLen, out.AcceptRate*100)
	if out.AcceptLen > 0 && !out.AcceptOverWindow {
		line += " (" + out.AcceptSource + ")" // a fallback's source says it is not over the window
	}
	if out.AcceptLen == 0 {
		line = fmt.Sprintf("%.1f tok/s (%.1f per stream), acceptance not measured", out.OutputTokS, out.PerStreamTokS)
	}
	for _, e := range out.Errors {
		st.warn("%s", e)
	}
	st.done("%s", line)
	return line, nil
}

// Bench is `bench`: benchmark the service as it runs now.
func (r *Runbook) Bench(ctx context.Context, service string, p commands.BenchParams, dryRun bool, rep Reporter) (*Result, error) {
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
	res.Summary = fmt.Sprintf("%s at steps %d: %s", service, res.Spec.Steps, line)
	return res, nil
}

// Sweep is `sweep steps LIST`: the mtp steps pipeline for each value, then a
// table with the best value marked; the service is left on its configured
// default steps, or where it was.
func (r *Runbook) Sweep(ctx context.Context, service string, steps []int, dryRun bool, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, err
	}
	sp, err := d.eff.Spec()
	if err != nil {
		return res, err
	}
	home := sp.DraftSteps()
	if t.cfg.DefaultSteps > 0 {
		home = t.cfg.DefaultSteps
	}
	for _, n := range steps {
		if _, err := r.plan(t, d, n); err != nil {
			return res, fmt.Errorf("steps %d: %w", n, err)
		}
	}
	if dryRun {
		res.Summary = fmt.Sprintf("dry run: would deploy and benchmark steps %v on %s, then leave it on steps %d", steps, service, home)
		return res, nil
	}
	for _, n := range steps {
		sub, err := r.MTPSteps(ctx, service, n, false, prefixed(rep, fmt.Sprintf("steps %d: ", n)))
		pt := SweepPoint{Steps: n, OK: err == nil}
		if sub != nil {
			for _, c := range sub.Incidents {
				res.AddIncident(c)
			}
			res.Killed = append(res.Killed, sub.Killed...)
			pt.Bench, pt.Spec = sub.Bench, sub.Spec
			if b := sub.Bench; b != nil {
				pt.OutputTokS, pt.PerStreamTokS, pt.AcceptLen, pt.AcceptRate = b.OutputTokS, b.PerStreamTokS, b.AcceptLen, b.AcceptRate
			}
		}
		if sub != nil {
			res.Left = sub.Left
		}
		if err != nil {
			pt.Error = err.Error()
			if ctx.Err() != nil {
				res.Points = append(res.Points, pt)
				return res, err
			}
		}
		res.Points = append(res.Points, pt)
	}
	for i := range res.Points {
		p := &res.Points[i]
		if p.OK && (res.Best == nil || p.OutputTokS > res.Best.OutputTokS) {
			best := *p
			res.Best = &best
		}
	}
	res.Details = append(res.Details, sweepTable(res.Points, res.Best))
	back, err := r.mtpSteps(ctx, service, home, false, false, prefixed(rep, fmt.Sprintf("back to steps %d: ", home)))
	if back != nil {
		res.Left = back.Left
	}
	if err != nil {
		return res, fmt.Errorf("sweep done, but returning %s to steps %d failed: %w", service, home, err)
	}
	res.Spec = &Spec{Engine: t.cfg.Engine, Steps: home}
	if res.Best == nil {
		return res, fmt.Errorf("no value of the sweep served: see the points")
	}
	res.Summary = fmt.Sprintf("sweep of %s: best steps %d at %.1f tok/s; left on steps %d", service, res.Best.Steps, res.Best.OutputTokS, home)
	return res, nil
}

func sweepTable(pts []SweepPoint, best *SweepPoint) string {
	s := fmt.Sprintf("%-6s %10s %10s %10s %8s\n", "steps", "tok/s", "per-stream", "accept len", "accept")
	for _, p := range pts {
		if !p.OK {
			s += fmt.Sprintf("%-6d failed: %s\n", p.Steps, p.Error)
			continue
		}
		mark := ""
		if best != nil && p.Steps == best.Steps {
			mark = "  <- best"
		}
		s += fmt.Sprintf("%-6d %10.1f %10.1f %10.2f %7.0f%%%s\n", p.Steps, p.OutputTokS, p.PerStreamTokS, p.AcceptLen, p.AcceptRate*100, mark)
	}
	return s
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
