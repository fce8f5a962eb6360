package ops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/opsbot/opsbot/ops/unit"
)

// propose is a per-load tune's measuring: no speculative decoding first,
// the search, then the configuration of the best values started and
// measured (startProposal), then what it is compared with: no speculation
// and the best single setting from the search, and with o.Compare SGLang's
// default adaptive table, started and measured at the same concurrencies.
func (s *perLoadSearch) propose(ctx context.Context, engine string, d *deployed, o PerLoadOptions) (*PerLoad, error) {
	if n := s.runningNow(ctx, d, o.From, o.To); n > 0 {
		s.live = n
		if _, err := s.measure(ctx, n); err != nil {
			return nil, err
		}
		s.res.Details = append(s.res.Details, fmt.Sprintf("steps %d, running when the tune began, measured first without a restart: %s", n, s.figures(n)))
	}
	if _, err := s.measure(ctx, 0); err != nil {
		return nil, err
	}
	s.res.Details = append(s.res.Details, "no speculative decoding (steps 0), measured first: "+s.figures(0))
	if err := s.run(ctx, o.From, o.To); err != nil {
		return nil, err
	}
	pl := perLoadRows(s.at, s.memo)
	if pl == nil {
		return nil, fmt.Errorf("no value tried served at every concurrency: %s", intList(s.res.Tried))
	}
	pl.Engine = engine
	s.res.Details = append(s.res.Details, s.traced(pl.Rows)...)
	if !slices.ContainsFunc(pl.Rows, func(r PerLoadRow) bool { return maxCandidate(r) > 0 }) {
		return nil, fmt.Errorf("no speculative decoding measured fastest at every concurrency (%s): there is no per-load configuration to propose; `mtp steps 0 %s` turns speculation off",
			s.figures(0), s.service)
	}
	if err := s.startProposal(ctx, pl, d); err != nil {
		return nil, err
	}
	pl.Compared = append([]PerLoadCompared{s.fromSearch("no_speculation", 0), s.fromSearch("best_single", pl.Single)}, pl.Compared...)
	if o.Compare && engine != "vllm" {
		c, err := s.measureDefault(ctx, d)
		if err != nil {
			return nil, err
		}
		pl.Compared = append(pl.Compared, c)
		if err := s.mixIfBehind(ctx, pl, d); err != nil {
			return nil, err
		}
	}
	pl.Missed = pl.misses(pl.Rows)
	return pl, nil
}

// figures is steps value n's tok/s at each concurrency, as measured.
func (s *perLoadSearch) figures(n int) string {
	parts := make([]string, len(s.at))
	for i, c := range s.at {
		parts[i] = fmt.Sprintf("%s at %d", tokText(s.memo[n][i]), c)
	}
	return strings.Join(parts, ", ")
}

// fromSearch is steps value n, as the search measured it, as a compared
// configuration.
func (s *perLoadSearch) fromSearch(name string, n int) PerLoadCompared {
	c := PerLoadCompared{Name: name, Setting: Setting{Steps: n}.String()}
	for i, conc := range s.at {
		p := PerLoadPoint{Concurrency: conc, OutputTokS: known(s.memo[n][i])}
		if p.OutputTokS == nil {
			p.Error = "failed in the search"
			for _, pt := range s.res.Points {
				if pt.Steps == n && pt.Concurrency == conc && !pt.OK && pt.Error != "" {
					p.Error = pt.Error
				}
			}
		}
		c.Points = append(c.Points, p)
	}
	return c
}

// SGLangDefaultTable says SGLang's DEFAULT_ADAPTIVE_CONFIG (sgl-project/sglang
// 015c8726, python/sglang/srt/speculative/adaptive_spec_params.py): what
// --speculative-adaptive runs without a config file.
const SGLangDefaultTable = "SGLang's default adaptive table (1: 1/3/5/7, 8: 0/1/3, 32: 0/1, 64: 0)"

// sglangDefaultSteps are the candidate steps of SGLang's default table above
// 0 its first slot holds: the unit's --speculative-num-steps must be one of
// the table's candidates, and each slot starts there when it holds it.
var sglangDefaultSteps = []int{1, 3, 5, 7}

// measureDefault starts SGLang's default adaptive table (the unit's flags
// with --speculative-adaptive and no config file, starting at the unit's
// steps when the table holds them, else 3) and benchmarks it at every
// concurrency. One that does not start is reported as such, its points
// failed.
func (s *perLoadSearch) measureDefault(ctx context.Context, d *deployed) (PerLoadCompared, error) {
	steps := 3
	if sp, err := d.eff.Spec(); err == nil && slices.Contains(sglangDefaultSteps, sp.DraftSteps()) {
		steps = sp.DraftSteps()
	}
	set := Setting{Steps: steps, adaptiveDefault: true, from: s.from}
	c := PerLoadCompared{Name: "sglang_default", Setting: SGLangDefaultTable}
	sub, err := s.r.mtpSet(ctx, s.service, set, false, false, prefixed(s.rep, "compare: "))
	s.took(sub)
	if err != nil {
		if ctx.Err() != nil || sub == nil || !sub.did.restored {
			return c, fmt.Errorf("starting %s: %w", SGLangDefaultTable, err)
		}
		for _, conc := range s.at {
			c.Points = append(c.Points, PerLoadPoint{Concurrency: conc, Error: "did not start: " + droppedReason(err)})
		}
		return c, nil
	}
	pts, _, lines, err := s.r.benchAt(ctx, s.t, set, s.at, s.r.perLoadPrompts, sub, prefixed(s.rep, "compare "))
	if err != nil {
		return c, err
	}
	s.res.Details = append(s.res.Details, prefixAll("SGLang's default adaptive table at ", lines)...)
	for _, p := range pts {
		pt := PerLoadPoint{Concurrency: p.Concurrency, Error: p.Error}
		if p.OK {
			pt.OutputTokS = known(p.OutputTokS)
		}
		c.Points = append(c.Points, pt)
	}
	return c, nil
}

// perLoadGoal is how far (relative) a per-load proposal may measure below
// what would run otherwise at a load (the best single setting, SGLang's
// default adaptive table, no speculation) and still be offered as no worse.
const perLoadGoal = 0.03

// sglangDefaultSlots are SGLang's DEFAULT_ADAPTIVE_CONFIG slots (the same
// source as SGLangDefaultTable): batch-size key, candidate steps.
var sglangDefaultSlots = []PerLoadRow{
	{Concurrency: 1, Steps: 1, Candidates: []int{1, 3, 5, 7}},
	{Concurrency: 8, Steps: 0, Candidates: []int{0, 1, 3}},
	{Concurrency: 32, Steps: 0, Candidates: []int{0, 1}},
	{Concurrency: 64, Steps: 0, Candidates: []int{0}},
}

// PerLoadMiss is a load where a proposal measured more than perLoadGoal
// below a configuration compared with it.
type PerLoadMiss struct {
	Concurrency int     `json:"concurrency"`
	Name        string  `json:"name"`     // the compared configuration's PerLoadCompared.Name
	GainPct     float64 `json:"gain_pct"` // the proposal's gain over it there (below -3)
}

// goalRefs are the configurations a proposal is held to at each load: what
// would run otherwise.
var goalRefs = []string{"no_speculation", "best_single", "sglang_default"}

// comparedAt is the figure of the compared configuration name at
// concurrency c (nil: not measured there, or not compared).
func (p *PerLoad) comparedAt(name string, c int) *float64 {
	for _, cmp := range p.Compared {
		if cmp.Name != name {
			continue
		}
		for _, pt := range cmp.Points {
			if pt.Concurrency == c {
				return pt.OutputTokS
			}
		}
	}
	return nil
}

// misses are the loads where rows (a table as measured) fall more than
// perLoadGoal below a configuration of goalRefs compared in p, the worst one
// at each load (a row not measured misses against any measured there).
func (p *PerLoad) misses(rows []PerLoadRow) []PerLoadMiss {
	var out []PerLoadMiss
	for _, row := range rows {
		var worst *PerLoadMiss
		for _, name := range goalRefs {
			ref := p.comparedAt(name, row.Concurrency)
			if ref == nil || *ref <= 0 {
				continue
			}
			g := -100.0
			if row.OutputTokS != nil {
				g = 100 * (*row.OutputTokS / *ref - 1)
			}
			if g < -100*perLoadGoal && (worst == nil || g < worst.GainPct) {
				worst = &PerLoadMiss{Concurrency: row.Concurrency, Name: name, GainPct: g}
			}
		}
		if worst != nil {
			out = append(out, *worst)
		}
	}
	return out
}

// missScore orders two measured tables held to the same references: fewer
// loads missed first, then the higher mean of each load's figure over the
// best reference there.
func (p *PerLoad) missScore(rows []PerLoadRow) (int, float64) {
	sum, n := 0.0, 0
	for _, row := range rows {
		best := 0.0
		for _, name := range goalRefs {
			if ref := p.comparedAt(name, row.Concurrency); ref != nil {
				best = max(best, *ref)
			}
		}
		if best > 0 && row.OutputTokS != nil {
			sum += *row.OutputTokS / best
			n++
		}
	}
	if n == 0 {
		return len(p.misses(rows)), 0
	}
	return len(p.misses(rows)), sum / float64(n)
}

// mixRows is the compare-driven mix of rows: at each load of miss, the
// per-load best of what was measured there takes the row's place (no
// speculation: 0 alone; the best single setting: its steps alone; SGLang's
// default table: the candidates of its slot serving that load); where the
// row runs the best already, the next compared configuration faster than it
// by more than perLoadGoal does; the rows elsewhere stay. A row another slot serves (its own dropped: the cap
// left alone) stays too: it has no slot to change. It says what it took,
// per load.
func (p *PerLoad) mixRows(rows []PerLoadRow, miss []PerLoadMiss) ([]PerLoadRow, []string) {
	out := slices.Clone(rows)
	var took []string
	for _, m := range miss {
		i := slices.IndexFunc(out, func(r PerLoadRow) bool { return r.Concurrency == m.Concurrency })
		if i < 0 || out[i].Slot != 0 {
			continue
		}
		own := 0.0
		if v := out[i].OutputTokS; v != nil {
			own = *v
		}
		// The compared configurations faster here than the row by more than
		// perLoadGoal, fastest first: the first that runs something else here
		// is taken.
		type alt struct {
			name  string
			v     float64
			cands []int
		}
		var alts []alt
		for _, name := range goalRefs {
			v := p.comparedAt(name, m.Concurrency)
			if v == nil || *v <= own*(1+perLoadGoal) {
				continue
			}
			a := alt{name: name, v: *v}
			switch name {
			case "no_speculation":
				a.cands = []int{0}
			case "best_single":
				a.cands = []int{p.Single}
			case "sglang_default":
				a.cands = amongAt(sglangDefaultSlots, m.Concurrency)
			}
			alts = append(alts, a)
		}
		slices.SortStableFunc(alts, func(a, b alt) int { return cmp.Compare(b.v, a.v) })
		k := slices.IndexFunc(alts, func(a alt) bool { return !slices.Equal(a.cands, out[i].Candidates) })
		if k < 0 {
			continue // what runs there already
		}
		best, bestV, cands := alts[k].name, alts[k].v, alts[k].cands
		row := &out[i]
		row.Steps, row.Candidates, row.StepsTokS = cands[0], cands, 0 // SGLang's slot: no steps value alone measured
		if best != "sglang_default" {
			row.StepsTokS = bestV
		}
		row.OutputTokS, row.AcceptLen, row.AcceptRate, row.MeasureError = nil, 0, 0, ""
		took = append(took, fmt.Sprintf("%d: %s (%s)", m.Concurrency, joinInts(cands, "/"), comparedWords(best)))
	}
	return out, took
}

// comparedWords names a compared configuration in a few words.
func comparedWords(name string) string {
	switch name {
	case "no_speculation":
		return "no speculation"
	case "best_single":
		return "the best single setting"
	case "sglang_default":
		return "SGLang's default adaptive table"
	}
	return name
}

// missText says misses in words: "16 (-4.2% against SGLang's default
// adaptive table), 64 (...)".
func missText(ms []PerLoadMiss) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%d (%+.1f%% against %s)", m.Concurrency, m.GainPct, comparedWords(m.Name))
	}
	return strings.Join(parts, ", ")
}

// mixIfBehind is compare's guard: when the proposal (pl, measured) falls
// more than perLoadGoal below no speculation, the best single setting or
// SGLang's default table at some load, the compare-driven mix (mixRows:
// the per-load best of what was measured at those loads) is started and
// measured at every concurrency like the proposal (perLoadTries when it does
// not serve; each start counted), with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND
// as the proposal had it, or on when the mix adds a slot holding only 0
// (skipZeroWins' known-safe side). The mix replaces the proposal only when it
// measured better (missScore: fewer loads missed, then the higher mean
// against the best reference); the other is kept in pl.Compared
// ("search_table" or "compare_mix"), and pl.Mix says what happened. Only a
// configuration that ran is proposed. Only ctx's end, a wind-down or a
// failed rollback is an error.
func (s *perLoadSearch) mixIfBehind(ctx context.Context, pl *PerLoad, d *deployed) error {
	miss := pl.misses(pl.Rows)
	if len(miss) == 0 {
		return nil
	}
	before := perLoadCommand(pl.Rows, pl.SkipZeroDraftExtend)
	mix, took := pl.mixRows(pl.Rows, miss)
	skip := pl.SkipZeroDraftExtend || (!zeroOnlySlot(pl.Rows) && zeroOnlySlot(mix))
	if !zeroOnlySlot(mix) {
		skip = false
	}
	if len(took) == 0 && skip == pl.SkipZeroDraftExtend {
		pl.Mix = fmt.Sprintf("The proposal measured more than %.0f%% below what would run otherwise at %s, where its slot runs what measured best there already "+
			"(or another slot serves the load: its own was dropped): nothing to take, the gap is the per-load form's own (a wave of requests ramps up "+
			"through the slots below) or the benchmarks' spread; proposed as measured.",
			100*perLoadGoal, missText(miss))
		return nil
	}
	for i := range mix {
		mix[i].OutputTokS, mix[i].AcceptLen, mix[i].AcceptRate, mix[i].MeasureError = nil, 0, 0, ""
	}
	what := "the per-load best of what was measured there: " + strings.Join(took, ", ")
	if len(took) == 0 {
		what = "the same table with " + unit.EnvSkipZeroDraftExtend + "=1"
	}
	s.res.Details = append(s.res.Details, fmt.Sprintf("compare: the proposal measured more than %.0f%% below what would run otherwise at %s: starting the mix, %s",
		100*perLoadGoal, missText(miss), what))
	tries := perLoadTries(pl.Engine, mix, hasFlag(d.eff.Argv(), unit.FlagMaxRunning))
	var dropped []string
	for _, try := range tries {
		sk := skip && zeroOnlySlot(try.rows)
		set := Setting{Steps: startSteps(pl.Engine, try.rows), perLoad: &perLoadSet{rows: tableRows(try.rows), skipZero: sk}, from: s.from}
		sub, err := s.r.mtpSet(ctx, s.service, set, false, false, prefixed(s.rep, "mix: "))
		s.took(sub)
		if err != nil {
			if ctx.Err() != nil || sub == nil || !sub.did.restored {
				return fmt.Errorf("starting the compare-driven mix %s: %w", perLoadWords(try.rows), err)
			}
			dropped = append(dropped, fmt.Sprintf("`%s`: %s", perLoadWords(try.rows), droppedReason(err)))
			continue
		}
		pts, running, lines, err := s.r.benchAt(ctx, s.t, set, s.at, s.r.perLoadPrompts, sub, prefixed(s.rep, "mix "))
		for _, c := range sub.Incidents {
			s.res.AddIncident(c)
		}
		if err != nil {
			return err
		}
		s.res.Details = append(s.res.Details, prefixAll("the compare-driven mix at ", lines)...)
		measured := measuredAt(try.rows, pts, running)
		n0, m0 := pl.missScore(pl.Rows)
		n1, m1 := pl.missScore(measured)
		words := perLoadCommand(try.rows, sk)
		if n1 < n0 || (n1 == n0 && m1 > m0) {
			pl.Compared = append(pl.Compared, PerLoadCompared{Name: "search_table", Setting: "the search's table, " + before, Points: rowPoints(pl.Rows)})
			pl.Rows, pl.SkipZeroDraftExtend, pl.Mixed = measured, sk, true
			pl.Mix = fmt.Sprintf("Compare-driven mix: the search's table (`%s`) measured more than %.0f%% below what would run otherwise at %s; the mix `%s` (%s) was started and measured: %d loads missed against %d, %.1f%% of the best compared on average against %.1f%%: proposed.",
				before, 100*perLoadGoal, missText(miss), words, what, n1, n0, 100*m1, 100*m0)
		} else {
			pl.Compared = append(pl.Compared, PerLoadCompared{Name: "compare_mix", Setting: "the compare-driven mix, " + words, Points: rowPoints(measured)})
			pl.Mix = fmt.Sprintf("Compare-driven mix `%s` (%s) started and measured: %d loads missed against the proposal's %d, %.1f%% of the best compared on average against %.1f%%: not better, the proposal stays.",
				words, what, n1, n0, 100*m1, 100*m0)
		}
		if len(dropped) > 0 {
			pl.Mix += " Not started: " + strings.Join(dropped, "; ") + "."
		}
		return nil
	}
	pl.Mix = fmt.Sprintf("The proposal measured more than %.0f%% below what would run otherwise at %s; the compare-driven mix did not serve (%s): rolled back, proposed as measured.",
		100*perLoadGoal, missText(miss), strings.Join(dropped, "; "))
	return nil
}
