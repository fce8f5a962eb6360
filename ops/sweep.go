package ops

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// Sweep metrics: the figure a sweep's best point is chosen by
// (Config.SweepMetric).
const (
	MetricOutputTokS    = "output_tok_s"
	MetricPerStreamTokS = "per_stream_tok_s"
	MetricAcceptLen     = "accept_len"
)

// MetricOf returns p's figure for metric (output_tok_s for "" or an unknown
// name; FigureAcceptRate: its acceptance rate), measured or not (Measured).
func MetricOf(p SweepPoint, metric string) float64 {
	switch metric {
	case MetricPerStreamTokS:
		return p.PerStreamTokS
	case MetricAcceptLen:
		return p.AcceptLen
	case FigureAcceptRate:
		return p.AcceptRate
	}
	return p.OutputTokS
}

// BestAt returns the point of a fixed setting at concurrency conc with the
// highest figure for metric among the points that measured it (of equal
// ones, the fewest steps, then the first), or nil when none did; points of
// a per-load form are not settings to choose. It is the one choice of the
// best setting at a load: the tables, the charts and the per-load proposal
// (perLoadRows, over the same figures: ties to the fewest steps) all read it.
func BestAt(pts []SweepPoint, conc int, metric string) *SweepPoint {
	var best *SweepPoint
	for i := range pts {
		p := &pts[i]
		if p.Concurrency != conc || p.PerLoad != nil || !p.Measured(metric) {
			continue
		}
		if v := MetricOf(*p, metric); best == nil || v > MetricOf(*best, metric) || (v == MetricOf(*best, metric) && p.Steps < best.Steps) {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	b := *best
	return &b
}

// SweepOptions are a sweep's grid and what it leaves behind.
type SweepOptions struct {
	Steps []int // the steps values, in order
	// TopK are SGLang's topk values crossed with Steps (empty: the unit's);
	// Draft the draft token counts crossed with each topk above 1 (empty:
	// the unit's). With topk 1, SGLang makes draft tokens steps+1.
	TopK, Draft []int
	// At are the concurrencies each value is benchmarked at, in order; empty
	// is the configured concurrency.
	At []int
	// ApplyBest leaves the service on the best point (at the first
	// concurrency, by Config.SweepMetric) instead of its configured default
	// steps, or where it was.
	ApplyBest bool
	DryRun    bool
}

func (r *Runbook) metric() string {
	if r.cfg.SweepMetric == "" {
		return MetricOutputTokS
	}
	return r.cfg.SweepMetric
}

// Sweep is `sweep steps LIST [topk LIST] [draft LIST] [at LIST]
// [--apply-best]`. The grid (steps crossed with o.TopK, and each topk above
// 1 with o.Draft; sweepGrid) is checked before anything changes. Each
// setting is deployed through the mtp steps pipeline (one restart: node
// lock, stop, clear the GPUs, write, start, verify) and then benchmarked at
// each concurrency of o.At without another restart. A setting that fails is
// recorded as failed points (with its error) and the sweep goes on; a
// cancel stops it at once. Result.Points holds one point per value and
// concurrency, Result.Best the best at the first concurrency by
// Config.SweepMetric (Result.Metric). Afterwards the service is put on the
// best point (o.ApplyBest), else on its configured default steps, else where
// it was; when that fails the sweep fails with restore_failed and
// Result.Left says the state it is in.
func (r *Runbook) Sweep(ctx context.Context, service string, o SweepOptions, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}, Metric: r.metric()}
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
	home := Setting{Steps: sp.DraftSteps()}
	if len(o.TopK) > 0 && sp.TopK > 0 {
		// The grid changes topk: put the unit's topk and draft tokens back.
		home.TopK = sp.TopK
		if sp.TopK > 1 {
			home.DraftTokens = sp.DraftTokens
		}
	} else if len(o.Draft) > 0 && sp.TopK > 1 {
		home.DraftTokens = sp.DraftTokens
	}
	if t.cfg.DefaultSteps > 0 {
		home.Steps = t.cfg.DefaultSteps
	}
	grid, skipped, err := r.sweepGrid(t, d, o)
	if err != nil {
		return res, err
	}
	// Each value is planned on the unit as found (a value after 0 gets its
	// speculative options back).
	f := foundUnit(d)
	home.from = f
	for i := range grid {
		grid[i].from = f
	}
	for _, sk := range skipped {
		res.Details = append(res.Details, "skipped "+sk)
	}
	if len(skipped) > 0 && !o.DryRun {
		st := begin(rep, "plan", "%d settings to deploy", len(grid))
		st.warn("skipped %d the draft tree cannot hold: %s", len(skipped), strings.Join(skipped, "; "))
		st.done("%d settings to deploy, %d skipped", len(grid), len(skipped))
	}
	at := o.At
	if len(at) == 0 {
		at = []int{r.withBenchDefaults(BenchParams{}).Concurrency}
	}
	leave := "leave it on " + home.String()
	if o.ApplyBest {
		leave = "leave it on the best point by " + res.Metric
	}
	if o.DryRun {
		names := make([]string, len(grid))
		for i, g := range grid {
			names[i] = g.String()
		}
		res.Summary = fmt.Sprintf("dry run: would deploy %s on %s (%d restarts), benchmark each at concurrency %s, then %s",
			strings.Join(names, "; "), service, len(grid), intList(at), leave)
		return res, nil
	}
	for i, n := range grid {
		if err := r.windDown(); err != nil {
			return res, fmt.Errorf("sweep stopped after %d of %d settings: %w; %s serves the last setting it deployed", i, len(grid), err, service)
		}
		pts, starts, err := r.sweepValue(ctx, t, service, n, at, nil, res, rep)
		res.Points = append(res.Points, pts...)
		res.Restarts += starts
		if err != nil && ctx.Err() != nil {
			return res, err
		}
	}
	res.Best = BestAt(res.Points, at[0], res.Metric)
	if sp.Engine != unit.VLLM && !hasFlag(d.eff.Argv(), "--max-running-requests") {
		if note := queuedNote(at); note != "" {
			res.Details = append(res.Details, note)
		}
	}
	to := home
	if o.ApplyBest && res.Best != nil {
		to = o.only(res.Best.Setting())
		to.from = f
	}
	back, err := r.settle(ctx, service, to, fmt.Sprintf("leave on %s: ", to), res, rep)
	if err != nil {
		return res, fmt.Errorf("sweep done, but putting %s back on %s failed: %w", service, to, err)
	}
	res.Spec = back.Spec
	if res.Best == nil {
		return res, fmt.Errorf("no value of the sweep served: see the points")
	}
	failed := 0
	for _, p := range res.Points {
		if !p.OK {
			failed++
		}
	}
	res.Summary = fmt.Sprintf("sweep of %s: best %s at concurrency %d (%s); left on %s",
		service, o.only(res.Best.Setting()), res.Best.Concurrency, metricText(res.Metric, MetricOf(*res.Best, res.Metric)), to)
	if failed > 0 {
		res.Summary += fmt.Sprintf(" (%d of %d points failed)", failed, len(res.Points))
	}
	return res, nil
}

// sweepValue deploys set and benchmarks it at each concurrency of at (with
// the configured prompts, or one per stream when the concurrency is higher),
// one point per concurrency (all failed, with the error, when the deploy
// failed). starts are the starts the deploy issued (a failed one and its
// rollback's are two).
func (r *Runbook) sweepValue(ctx context.Context, t *target, service string, set Setting, at []int, prompts func(c int) int, res *Result, rep Reporter) ([]SweepPoint, int, error) {
	n := set.Steps
	sub, err := r.mtpSet(ctx, service, set, false, false, prefixed(rep, set.String()+": "))
	restarted := 0
	if sub != nil {
		restarted = sub.did.starts
		for _, c := range sub.Incidents {
			res.AddIncident(c)
		}
		res.Killed = append(res.Killed, sub.Killed...)
		res.Left = sub.Left
	}
	if err != nil {
		pts := make([]SweepPoint, 0, len(at))
		for _, c := range at {
			pts = append(pts, SweepPoint{Steps: n, TopK: set.TopK, DraftTokens: set.DraftTokens, Concurrency: c, Error: err.Error()})
		}
		return pts, restarted, err
	}
	pts, err := r.benchEach(ctx, t, set, at, prompts, sub, res, rep)
	return pts, restarted, err
}

// benchEach benchmarks what the service serves now (set, sub its result
// with the spec it runs) at each concurrency of at: one point each, with
// prompts(c) prompts (nil: r.sweepPrompts). Only ctx's end is an error.
func (r *Runbook) benchEach(ctx context.Context, t *target, set Setting, at []int, prompts func(c int) int, sub, res *Result, rep Reporter) ([]SweepPoint, error) {
	if prompts == nil {
		prompts = r.sweepPrompts
	}
	n := set.Steps
	pts := make([]SweepPoint, 0, len(at))
	for _, c := range at {
		prefix := set.String() + ": "
		if len(at) > 1 {
			prefix = fmt.Sprintf("%s at %d: ", set, c)
		}
		sub.Bench = nil
		bp := BenchParams{Concurrency: c, Prompts: prompts(c)}
		_, err := r.benchmark(ctx, t, bp, sub, prefixed(rep, prefix))
		pt := SweepPoint{Steps: n, Concurrency: c, OK: err == nil, Spec: sub.Spec}
		if sub.Spec != nil && sub.Spec.Engine != "vllm" {
			pt.TopK, pt.DraftTokens = sub.Spec.TopK, sub.Spec.DraftTokens
		}
		if b := sub.Bench; b != nil {
			pt.Bench = b
			pt.OutputTokS, pt.PerStreamTokS, pt.AcceptLen, pt.AcceptRate = b.OutputTokS, b.PerStreamTokS, b.AcceptLen, b.AcceptRate
		}
		if err != nil {
			pt.Error = err.Error()
			res.AddIncident(IncidentBenchFailed)
			if ctx.Err() != nil {
				return append(pts, pt), err
			}
		}
		pts = append(pts, pt)
	}
	return pts, nil
}

// sweepPrompts is the prompts of a sweep's benchmark at concurrency c: the
// configured prompts, and at least one per stream, so that the concurrency
// is reached.
func (r *Runbook) sweepPrompts(c int) int {
	return max(c, r.withBenchDefaults(BenchParams{}).Prompts)
}

func metricText(metric string, v float64) string {
	switch metric {
	case MetricAcceptLen:
		return fmt.Sprintf("accept len %.2f", v)
	case MetricPerStreamTokS:
		return fmt.Sprintf("%.1f tok/s per stream", v)
	}
	return fmt.Sprintf("%.1f tok/s", v)
}

func intList(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ",")
}

// TuneOptions are mtp tune's search range and load.
type TuneOptions struct {
	From, To    int // the steps values searched, From < To
	Concurrency int // the load's concurrency; 0 = the configured one
	DryRun      bool
}

// golden is the golden-section ratio's smaller part, (3 - sqrt 5) / 2.
var golden = (3 - math.Sqrt(5)) / 2

// Tune is `mtp tune [RANGE] [at N]`: it finds the steps value in
// o.From..o.To with the highest output tok/s at concurrency o.Concurrency
// and leaves the service on it. Throughput over steps is unimodal (it rises
// while more accepted drafts pay for the longer verify step, then falls), so
// it runs a golden-section search over the integers: two inner values split
// the range, the side of the slower one is dropped (its peak cannot be
// there), and values already measured are reused; once at most three values
// are left, each is measured. Every value measured is one deploy through
// the mtp steps pipeline (one restart) and one benchmark; a value that fails
// counts as the slowest. Result.Points are the values measured in order,
// Result.Tried their steps, Result.Restarts the deploys (the final one
// included), and Result.Details say why each side was dropped and why the
// search stopped. A cancel stops it where it is (Result.Left says where).
func (r *Runbook) Tune(ctx context.Context, service string, o TuneOptions, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}, Metric: MetricOutputTokS}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if o.From < 0 || o.To <= o.From {
		return res, fmt.Errorf("tune %s: the range %d..%d must go up and hold two values at least (0: speculative decoding off)", service, o.From, o.To)
	}
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, err
	}
	for _, n := range []int{o.From, o.To} {
		if _, err := r.plan(t, d, Setting{Steps: n}); err != nil {
			return res, fmt.Errorf("steps %d: %w", n, err)
		}
	}
	conc := o.Concurrency
	if conc <= 0 {
		conc = r.withBenchDefaults(BenchParams{}).Concurrency
	}
	if o.DryRun {
		res.Summary = fmt.Sprintf("dry run: would search steps %d..%d on %s at concurrency %d (a golden-section search: "+
			"one restart per value it measures; a full sweep needs %d), then leave it on the fastest", o.From, o.To, service, conc, o.To-o.From+1)
		return res, nil
	}
	memo, f := map[int]float64{}, foundUnit(d)
	measure := func(n int) (float64, error) {
		if v, ok := memo[n]; ok {
			return v, nil
		}
		pts, starts, err := r.sweepValue(ctx, t, service, Setting{Steps: n, from: f}, []int{conc}, nil, res, rep)
		res.Restarts += starts
		res.Points = append(res.Points, pts...)
		res.Tried = append(res.Tried, n)
		v := math.Inf(-1)
		if len(pts) == 1 && pts[0].OK {
			v = pts[0].OutputTokS
		}
		memo[n] = v
		if err != nil && ctx.Err() != nil {
			return v, err
		}
		return v, nil
	}
	a, b, err := goldenMax(o.From, o.To, measure, func(m1 int, f1 float64, m2 int, f2 float64, from, to [2]int) {
		st := begin(rep, "search", "steps %d..%d", from[0], from[1])
		a, b := to[0], to[1]
		if f1 < f2 {
			st.done("steps %d (%s) < steps %d (%s): the peak is above %d, search %d..%d", m1, tokText(f1), m2, tokText(f2), m1, a, b)
		} else {
			st.done("steps %d (%s) >= steps %d (%s): the peak is below %d, search %d..%d", m1, tokText(f1), m2, tokText(f2), m2, a, b)
		}
		res.Details = append(res.Details, fmt.Sprintf("steps %d: %s, steps %d: %s → search %d..%d", m1, tokText(f1), m2, tokText(f2), a, b))
	})
	if err != nil {
		return res, err
	}
	res.Best = BestAt(res.Points, conc, MetricOutputTokS)
	why := fmt.Sprintf("stopped: %d..%d is narrowed to %d values and each was measured; %d values tried of %d (%s)",
		a, b, b-a+1, len(res.Tried), o.To-o.From+1, intList(res.Tried))
	res.Details = append(res.Details, why)
	if res.Best == nil {
		return res, fmt.Errorf("no value tried served: %s", intList(res.Tried))
	}
	best := res.Best.Steps
	if _, err := r.settle(ctx, service, Setting{Steps: best, from: f}, fmt.Sprintf("apply steps %d: ", best), res, rep); err != nil {
		return res, fmt.Errorf("tune done (best steps %d), but putting %s on it failed: %w", best, service, err)
	}
	res.Spec = res.Best.Spec
	res.Summary = fmt.Sprintf("mtp tune %s at concurrency %d: steps %d, %.1f tok/s, applied; %d restarts for %d values (a full sweep: %d)",
		service, conc, best, res.Best.OutputTokS, res.Restarts, len(res.Tried), o.To-o.From+1)
	if e := tuneEdge(service, o.From, o.To, conc, best, r.cfg.MaxSteps, memo); e != "" {
		res.Summary += ". " + e
		res.Details = append(res.Details, e)
	}
	return res, nil
}

// tuneEdge says so when the best steps value of a search over from..to lies
// on the edge of the range, where the peak may lie beyond it, and gives the
// command that searches the wider range (up to maxSteps, down to 1); ""
// when the best lies inside, or on an edge nothing lies beyond. tok are
// the output tok/s measured by steps value.
func tuneEdge(service string, from, to, conc, best, maxSteps int, tok map[int]float64) string {
	width := max(to-from, 2)
	var side string
	var lo, hi, next int
	switch {
	case best == to && to < maxSteps:
		side, next = "top", best-1
		lo, hi = best, min(maxSteps, best+width)
	case best == from && from > 1:
		side, next = "bottom", best+1
		lo, hi = max(1, best-width), best
	default:
		return ""
	}
	s := fmt.Sprintf("Steps %d is the %s of the range %d..%d searched", best, side, from, to)
	if v, ok := tok[next]; ok && !math.IsInf(v, -1) {
		s += fmt.Sprintf(", and tok/s was still rising toward it (steps %d: %.1f, steps %d: %.1f)", next, v, best, tok[best])
	}
	return s + fmt.Sprintf(": the peak may lie beyond it. `mtp tune %s %d..%d at %d` searches the wider range.", service, lo, hi, conc)
}

func tokText(v float64) string {
	if math.IsInf(v, -1) {
		return "failed"
	}
	return fmt.Sprintf("%.1f tok/s", v)
}

// only keeps of s what the sweep varies: its steps, and its topk and draft
// tokens when the sweep lists them (the rest stays as the unit has it).
func (o SweepOptions) only(s Setting) Setting {
	if len(o.TopK) == 0 {
		s.TopK = 0
	}
	if len(o.Draft) == 0 {
		s.DraftTokens = 0
	}
	return s
}

// Setting is the setting p ran with (TopK and DraftTokens 0 for vLLM).
func (p SweepPoint) Setting() Setting {
	s := Setting{Steps: p.Steps, TopK: p.TopK}
	if p.TopK > 1 {
		s.DraftTokens = p.DraftTokens
	}
	return s
}

// sweepGrid crosses o's steps with its topk and draft lists, in order (steps
// outermost), and checks each setting against the unit and SGLang's rules.
// A topk/draft combination the draft tree cannot hold at some steps value is
// skipped there and named in skipped; any other refusal refuses the sweep.
func (r *Runbook) sweepGrid(t *target, d *deployed, o SweepOptions) (grid []Setting, skipped []string, err error) {
	topks := o.TopK
	if len(topks) == 0 {
		topks = []int{0}
	}
	for _, n := range o.Steps {
		for _, k := range topks {
			drafts := []int{0}
			if k != 1 && len(o.Draft) > 0 {
				drafts = o.Draft
			}
			for _, dr := range drafts {
				s := Setting{Steps: n, TopK: k, DraftTokens: dr}
				if _, err := r.plan(t, d, s); err != nil {
					if errors.Is(err, unit.ErrRejected) && (k > 1 || dr > 0) {
						skipped = append(skipped, fmt.Sprintf("%s: %v", s, err))
						continue
					}
					return nil, nil, fmt.Errorf("%s: %w", s, err)
				}
				grid = append(grid, s)
			}
		}
	}
	if len(grid) == 0 {
		return nil, skipped, fmt.Errorf("no setting of the sweep is possible: %s", strings.Join(skipped, "; "))
	}
	return grid, skipped, nil
}

// settle puts service on set once a sweep or a tune has measured (label
// prefixes the steps in the thread): res records where it left the service
// and the restart that cost, and a failure adds IncidentRestoreFailed. It
// returns that change's own result and error.
func (r *Runbook) settle(ctx context.Context, service string, set Setting, label string, res *Result, rep Reporter) (*Result, error) {
	back, err := r.mtpSet(ctx, service, set, false, false, prefixed(rep, label))
	if back != nil {
		res.Left = back.Left
		res.Restarts += back.did.starts
	}
	if err != nil {
		res.AddIncident(IncidentRestoreFailed)
	}
	return back, err
}
