package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/opsbot/opsbot/ops/systemd"
	"github.com/opsbot/opsbot/ops/unit"
)

// A proposal is a measurement: a per-load tune starts the configuration it
// would propose, through the mtp steps pipeline, and benchmarks it at every
// concurrency; one that does not serve is rolled back, dropped (saying why)
// and the next of perLoadTries is started instead.

// perLoadWaves is the measuring window of a per-load tune: every benchmark
// it runs (the search's, the proposal's, the comparisons') at concurrency c
// sends at least perLoadWaves x c prompts, perLoadWaves waves of requests
// (more above SGLang's cap of 48 running with speculation), so that a figure
// is the engine's steady state at that load, not one wave's ramp. One wave
// (the concurrency's own prompts) lasts under a second of decode on the lab
// at 32 and more: on a busy machine such figures read 15 to 30% off and
// flipped the per-load choices and the SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND
// decision from one run to the next. At low loads the configured prompts
// (bench.prompts) are several waves already and unchanged, so the window
// costs time only where one wave is short.
var perLoadWaves = 4 // a var only so that a long lab test may shorten it (export_test.go)

// perLoadPrompts is the prompts of a per-load tune's benchmark at
// concurrency c: bench.prompts, or perLoadWaves waves when that is more.
func (r *Runbook) perLoadPrompts(c int) int {
	return max(r.withBenchDefaults(BenchParams{}).Prompts, perLoadWaves*c)
}

// perLoadWindow says the measuring window in a line: the prompts of each
// benchmark at each concurrency of at.
func (r *Runbook) perLoadWindow(at []int) string {
	parts := make([]string, len(at))
	for i, c := range at {
		parts[i] = fmt.Sprintf("%d at %d", r.perLoadPrompts(c), c)
	}
	return fmt.Sprintf("Measuring window: each benchmark sent %s prompts (bench.prompts, or %d waves of requests where that is more: "+
		"a figure is the steady state at its load, not one wave's ramp).", strings.Join(parts, ", "), perLoadWaves)
}

// perLoadTry is one configuration a per-load tune starts: its rows (one per
// concurrency measured; a row whose slot the try drops says which slot
// serves it instead) and what it drops from the try before it.
type perLoadTry struct {
	rows   []PerLoadRow
	change string
}

// perLoadTries are the configurations a per-load tune starts in turn until
// one serves, three at most, each distinct: the rows as measured; for SGLang
// when they raise its running-request cap (a slot above 48, on a unit that
// does not set --max-running-requests), the same
// with the cap left alone and the slots above 48 dropped (with 48 running
// no batch reaches them: the slot below serves those loads, and the
// requests above 48 queue); then each slot at its best steps alone (SGLang
// captures each step's CUDA graphs for the batch sizes whose slot lists it).
func perLoadTries(engine string, rows []PerLoadRow, unitSetsCap bool) []perLoadTry {
	tries := []perLoadTry{{rows: rows}}
	if engine == "vllm" {
		return tries
	}
	last := rows
	if n := capNeeded(last); n > 0 && !unitSetsCap {
		if within := withinCap(last); slices.ContainsFunc(tableRows(within), func(r PerLoadRow) bool { return maxCandidate(r) > 0 }) {
			last = within
			tries = append(tries, perLoadTry{rows: last, change: fmt.Sprintf("%s %d and the slots above %d: SGLang's cap of %d left alone", unit.FlagMaxRunning, n, sglangSpecCap, sglangSpecCap)})
		}
	}
	if slices.ContainsFunc(last, func(r PerLoadRow) bool { return len(r.Candidates) > 1 }) {
		single := slices.Clone(last)
		for i := range single {
			single[i].Candidates = []int{single[i].Steps}
		}
		tries = append(tries, perLoadTry{rows: single, change: "the other candidates of each slot: each slot runs its best steps alone"})
	}
	return tries
}

// maxCandidate is the largest steps value row may run.
func maxCandidate(row PerLoadRow) int {
	return slices.Max(append([]int{row.Steps}, row.Candidates...))
}

// startProposal starts each of pl's tries in turn until one serves (the
// service is rolled back after one that does not), benchmarks it at every
// concurrency and records in pl what ran and what was measured, and in
// pl.Dropped the tries that did not serve. It fails when none served, or
// when a rollback left the service not serving.
func (s *perLoadSearch) startProposal(ctx context.Context, pl *PerLoad, d *deployed) error {
	tries := perLoadTries(pl.Engine, pl.Rows, hasFlag(d.eff.Argv(), unit.FlagMaxRunning))
	for i, try := range tries {
		skip := pl.Engine != "vllm" && zeroOnlySlot(try.rows)
		set := Setting{Steps: startSteps(pl.Engine, try.rows), perLoad: &perLoadSet{rows: tableRows(try.rows), skipZero: skip}, from: s.from}
		sub, err := s.r.mtpSet(ctx, s.service, set, false, false, prefixed(s.rep, "proposal: "))
		s.took(sub)
		if err == nil {
			pts, running, lines, err := s.r.benchAt(ctx, s.t, set, s.at, s.r.perLoadPrompts, sub, prefixed(s.rep, "proposal "))
			for _, c := range sub.Incidents {
				s.res.AddIncident(c)
			}
			if err != nil {
				return err
			}
			pl.Rows, pl.SkipZeroDraftExtend = measuredAt(try.rows, pts, running), skip
			what := "the proposal at "
			if skip {
				what = "the proposal with " + unit.EnvSkipZeroDraftExtend + "=1 at "
			}
			s.res.Details = append(s.res.Details, prefixAll(what, lines)...)
			if skip {
				if at := belowSearch(pl.Rows); at != "" {
					return s.measureWithoutSkipZero(ctx, pl, try.rows, at)
				}
				s.res.Details = append(s.res.Details, fmt.Sprintf("%s=1 (a slot holds only 0): where a slot of 0 serves, nowhere more than %.0f%% below no speculation as the search measured it: proposed with it, not measured without it",
					unit.EnvSkipZeroDraftExtend, 100*skipZeroNoise))
			}
			return nil
		}
		if ctx.Err() != nil || sub == nil || !sub.did.restored {
			return fmt.Errorf("starting the per-load configuration %s: %w", perLoadWords(try.rows), err)
		}
		why := droppedReason(err)
		pl.Dropped = append(pl.Dropped, PerLoadDropped{Table: perLoadWords(try.rows), Reason: why})
		if i+1 < len(tries) {
			pl.Dropped[len(pl.Dropped)-1].Change = tries[i+1].change
		}
	}
	return fmt.Errorf("no per-load configuration of the values measured started: %s", droppedText(pl.Dropped))
}

// took adds what a deploy of the tune did to its result: its starts and
// incidents, and where it left the service.
func (s *perLoadSearch) took(sub *Result) {
	if sub == nil {
		return
	}
	s.res.Restarts += sub.did.starts
	for _, c := range sub.Incidents {
		s.res.AddIncident(c)
	}
	s.res.Killed = append(s.res.Killed, sub.Killed...)
	s.res.Left = sub.Left
}

// droppedReason says in a line why a configuration did not serve.
func droppedReason(err error) string {
	var se *StartError
	if errors.As(err, &se) && se.Diag.Cause == systemd.CauseSettingsDoNotFit {
		line := "it ran out of GPU memory at start, on GPUs seen clear"
		if se.Diag.Line != "" {
			line += fmt.Sprintf(" (%q)", se.Diag.Line)
		}
		return line
	}
	msg := err.Error()
	if i := strings.Index(msg, "; restored the previous unit"); i > 0 {
		msg = msg[:i]
	}
	return msg
}

func droppedText(ds []PerLoadDropped) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("`%s`: %s", d.Table, d.Reason)
	}
	return strings.Join(parts, "; ")
}

func prefixAll(prefix string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = prefix + l
	}
	return out
}

// startSteps is the steps the unit starts a per-load configuration with:
// vLLM's num_speculative_tokens is the table's largest k; SGLang's
// --speculative-num-steps the table's smallest candidate above 0 (it must be
// one of the table's candidates). SGLang captures the launch steps' CUDA
// graphs at every graph batch size up to its cap and each other candidate
// only at the batch sizes whose slot lists it (eagle_worker_v2.py
// init_cuda_graphs, adaptive_step_router.py cuda_graph_bs_for_step; see
// lab/engine/memory.go), and the graphs share one pool sized by the largest:
// launched at its deep first slot's best, a table with a raised cap captures
// that depth at 64 requests and may not fit the GPUs; launched shallow it
// captures the depth only where a slot asks for it. A slot that does not hold
// the launch steps starts at its middle candidate.
func startSteps(engine string, rows []PerLoadRow) int {
	top, low := 0, 0
	for _, r := range tableRows(rows) {
		top = max(top, maxCandidate(r))
		for _, n := range append([]int{r.Steps}, r.Candidates...) {
			if n > 0 && (low == 0 || n < low) {
				low = n
			}
		}
	}
	if engine == "vllm" || low == 0 {
		return top
	}
	return low
}

// tableRows are the rows that have a slot of their own in the table (the
// others are served by the slot below them: PerLoadRow.Slot).
func tableRows(rows []PerLoadRow) []PerLoadRow {
	var out []PerLoadRow
	for _, r := range rows {
		if r.Slot == 0 {
			out = append(out, r)
		}
	}
	return out
}

// measuredAt is rows with the figures measured at each concurrency (pts,
// one per row) and the requests that queued with running at once (0:
// unknown).
func measuredAt(rows []PerLoadRow, pts []SweepPoint, running int) []PerLoadRow {
	out := slices.Clone(rows)
	for i := range out {
		r := &out[i]
		for _, p := range pts {
			if p.Concurrency != r.Concurrency {
				continue
			}
			if p.OK {
				v := p.OutputTokS
				r.OutputTokS, r.AcceptLen, r.AcceptRate = &v, p.AcceptLen, p.AcceptRate
			} else {
				r.MeasureError = p.Error
			}
		}
		if running > 0 {
			r.Queued = max(r.Concurrency-running, 0)
		}
		r.GainPct, r.NoSpecGainPct = gainPct(r.OutputTokS, r.SingleTokS), gainPct(r.OutputTokS, r.NoSpecTokS)
	}
	return out
}

// benchAt benchmarks what the service serves now (set, as sub verified it)
// at each concurrency of at, with prompts(c) prompts (nil: the configured
// prompts or one per stream when the concurrency is higher): one point each. running is SGLang's
// max_running_requests from /server_info (0: unknown or vLLM); lines say
// each benchmark and the requests that queued. Only ctx's end or a wind-down
// is an error: a benchmark that fails is a failed point.
func (r *Runbook) benchAt(ctx context.Context, t *target, set Setting, at []int, prompts func(c int) int, sub *Result, rep Reporter) ([]SweepPoint, int, []string, error) {
	if prompts == nil {
		prompts = r.sweepPrompts
	}
	running := 0
	if sub.Spec != nil && sub.Spec.Engine != unit.VLLM {
		if info, err := t.eng.ServerInfo(ctx); err == nil {
			if v, ok := info.Raw["max_running_requests"].(json.Number); ok {
				if n, err := v.Int64(); err == nil {
					running = int(n)
				}
			}
		}
	}
	var pts []SweepPoint
	var lines []string
	for _, c := range at {
		if err := r.windDown(); err != nil {
			return pts, running, lines, fmt.Errorf("benchmarks stopped: %w; %s serves %s", err, t.name, set)
		}
		sub.Bench = nil
		bp := BenchParams{Concurrency: c, Prompts: prompts(c)}
		b, err := r.benchmark(ctx, t, bp, sub, prefixed(rep, fmt.Sprintf("at %d: ", c)))
		pt := SweepPoint{Steps: set.Steps, Concurrency: c, OK: err == nil, Spec: sub.Spec}
		switch {
		case set.perLoad != nil:
			pt.PerLoad = &PointPerLoad{Among: amongAt(set.perLoad.rows, c)}
		case set.adaptiveDefault:
			pt.PerLoad = &PointPerLoad{} // SGLang's own table: what ran is what the engine reports
		}
		if sub.Bench != nil {
			pt.Bench = sub.Bench
			pt.OutputTokS, pt.PerStreamTokS, pt.AcceptLen, pt.AcceptRate = sub.Bench.OutputTokS, sub.Bench.PerStreamTokS, sub.Bench.AcceptLen, sub.Bench.AcceptRate
			if pt.PerLoad != nil {
				pt.PerLoad.Chosen = sub.Bench.EngineSteps
			}
		}
		// Each benchmark is one of the points, kept once (history lists it
		// once): none stands apart as the result's own.
		sub.Bench = nil
		line := fmt.Sprintf("concurrency %d: %s", c, b)
		if pt.PerLoad != nil {
			// What ran there; the figures are the points' (the report's table).
			line = fmt.Sprintf("concurrency %d: %s", c, pt.Ran())
		}
		if err != nil {
			pt.Error = err.Error()
			sub.AddIncident(IncidentBenchFailed)
			line = fmt.Sprintf("concurrency %d: benchmark failed: %v", c, err)
			if ctx.Err() != nil {
				return append(pts, pt), running, lines, err
			}
		}
		pts = append(pts, pt)
		switch {
		case running > 0 && c > running:
			line += fmt.Sprintf("; %d of %d requests queued (the engine runs at most %d at once)", c-running, c, running)
		case running > 0:
			line += fmt.Sprintf("; no requests queued (the engine runs up to %d at once)", running)
		}
		lines = append(lines, line)
	}
	return pts, running, lines, nil
}

// belowSearch names the concurrencies a slot holding only 0 serves where
// rows (a table measured with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND)
// measured more than skipZeroNoise below no speculation as the search
// measured it there ("" when none): only there can the switch have cost (a
// stream drafting again after a step 0 starts from a cold draft state), and
// only then is the table measured without it too. A load a slot with
// speculation serves runs the same with the switch or without it: a figure
// low there is noise, not the switch's.
func belowSearch(rows []PerLoadRow) string {
	var at []string
	for _, r := range rows {
		if maxCandidate(r) == 0 && r.OutputTokS != nil && r.StepsTokS > 0 && *r.OutputTokS < r.StepsTokS*(1-skipZeroNoise) {
			at = append(at, fmt.Sprintf("%d (%+.1f%%)", r.Concurrency, 100*(*r.OutputTokS/r.StepsTokS-1)))
		}
	}
	return strings.Join(at, ", ")
}

// measureWithoutSkipZero starts pl's table (rows, measured in pl.Rows with
// SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND, slower than no
// speculation at the concurrencies below, which a slot of 0 serves) again
// without it: with the switch a slot
// holding only 0 skips the draft model's extend, but a stream drafting
// again after it starts from a cold draft state. It benchmarks it at every
// concurrency and keeps the switch when it wins (skipZeroWins); the table
// measured the other way goes to pl.Compared. A start that fails is rolled
// back and said; only ctx's end, a wind-down or a failed rollback is an
// error.
func (s *perLoadSearch) measureWithoutSkipZero(ctx context.Context, pl *PerLoad, rows []PerLoadRow, below string) error {
	s.res.Details = append(s.res.Details, fmt.Sprintf("with %s=1 the table measured more than %.0f%% below no speculation (as the search measured it) where a slot of 0 serves, at %s: measured without it too",
		unit.EnvSkipZeroDraftExtend, 100*skipZeroNoise, below))
	set := Setting{Steps: startSteps(pl.Engine, rows), perLoad: &perLoadSet{rows: tableRows(rows)}, from: s.from}
	sub, err := s.r.mtpSet(ctx, s.service, set, false, false, prefixed(s.rep, "proposal without "+skipZeroWord+": "))
	s.took(sub)
	if err != nil {
		if ctx.Err() != nil || sub == nil || !sub.did.restored {
			return fmt.Errorf("starting %s: %w", set, err)
		}
		s.res.Details = append(s.res.Details, fmt.Sprintf("without %s the table did not serve: %s; rolled back, proposed with it", unit.EnvSkipZeroDraftExtend, droppedReason(err)))
		return nil
	}
	pts, running, lines, err := s.r.benchAt(ctx, s.t, set, s.at, s.r.perLoadPrompts, sub, prefixed(s.rep, "proposal without "+skipZeroWord+" "))
	for _, c := range sub.Incidents {
		s.res.AddIncident(c)
	}
	if err != nil {
		return err
	}
	s.res.Details = append(s.res.Details, prefixAll("the proposal without "+unit.EnvSkipZeroDraftExtend+" at ", lines)...)
	with := pl.Rows
	without := measuredAt(rows, pts, running)
	wins, why := skipZeroWins(without, with)
	s.res.Details = append(s.res.Details, fmt.Sprintf("%s=1 (a slot holds only 0): %s", unit.EnvSkipZeroDraftExtend, why))
	other := PerLoadCompared{Name: "without_skip_zero_extend", Setting: "the same table without " + unit.EnvSkipZeroDraftExtend, Points: rowPoints(without)}
	if !wins {
		pl.Rows, pl.SkipZeroDraftExtend = without, false
		other = PerLoadCompared{Name: "with_skip_zero_extend", Setting: "the same table with " + unit.EnvSkipZeroDraftExtend + "=1", Points: rowPoints(with)}
	}
	pl.Compared = append(pl.Compared, other)
	return nil
}

// skipZeroNoise is the least spread a figure of one benchmark is taken to
// have (relative): the 3% a per-load proposal is held to against what would
// run otherwise.
const skipZeroNoise = 0.03

// skipZeroWins says whether the table measured with
// SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND (with) is to be proposed rather
// than without it (without), and why, in words. The rule, noise-robust: keep
// the switch unless it measurably loses. At a slot holding only 0 the draft
// model's extend is work no token uses (known-safe to skip); what the switch
// may cost is a cold draft state for a stream that drafts again, which only
// the loads such a slot serves can show. So it loses only when, over those
// loads, the table without it measured faster on average by more than the
// measurements' own spread: the largest difference between the two runs at
// the loads below every slot that holds 0, where both run the same table
// (a batch there never reaches a slot of 0), and at least skipZeroNoise.
func skipZeroWins(without, with []PerLoadRow) (bool, string) {
	inertBelow := 0 // loads below it: the switch cannot act there
	for _, r := range tableRows(with) {
		if slices.Contains(append([]int{r.Steps}, r.Candidates...), 0) {
			inertBelow = r.Concurrency
			break
		}
	}
	spread, spreadAt := 0.0, []int{}
	sum, n := 0.0, 0
	var acts []int
	for i := range with {
		a, b := with[i].OutputTokS, without[i].OutputTokS
		if a == nil || b == nil || *b <= 0 {
			continue
		}
		g := *a / *b - 1
		switch {
		case maxCandidate(with[i]) == 0:
			sum += g
			n++
			acts = append(acts, with[i].Concurrency)
		case with[i].Concurrency < inertBelow:
			spread = max(spread, math.Abs(g))
			spreadAt = append(spreadAt, with[i].Concurrency)
		}
	}
	if n == 0 {
		return true, "not measured both ways where a slot of 0 serves: proposed with it (at a slot of 0 the draft model's extend is work no token uses)"
	}
	band := max(spread, skipZeroNoise)
	spreadText := fmt.Sprintf("the %.0f%% floor", 100*skipZeroNoise)
	if len(spreadAt) > 0 {
		spreadText = fmt.Sprintf("the spread of the same table measured twice at %s (%.1f%%), at least %.0f%%", intList(spreadAt), 100*spread, 100*skipZeroNoise)
	}
	mean := 100 * sum / float64(n)
	if sum/float64(n) < -band {
		return false, fmt.Sprintf("%+.1f%% with it where a slot of 0 serves (%s), a loss beyond %s: proposed without it", mean, intList(acts), spreadText)
	}
	return true, fmt.Sprintf("%+.1f%% with it where a slot of 0 serves (%s), within %s or better: proposed with it (at a slot of 0 the draft model's extend is work no token uses)",
		mean, intList(acts), spreadText)
}

// rowPoints are rows' measured figures as a compared configuration's points.
func rowPoints(rows []PerLoadRow) []PerLoadPoint {
	out := make([]PerLoadPoint, len(rows))
	for i, r := range rows {
		out[i] = PerLoadPoint{Concurrency: r.Concurrency, OutputTokS: r.OutputTokS, Error: r.MeasureError}
	}
	return out
}
