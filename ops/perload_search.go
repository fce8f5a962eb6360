package ops

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
)

// perLoadSearch is the measuring of a per-load tune: each steps value tried
// is deployed once through the mtp steps pipeline and benchmarked at every
// concurrency of at on that start, its points, restart and value recorded in
// res.
type perLoadSearch struct {
	r       *Runbook
	t       *target
	service string
	at      []int // the concurrencies, ascending
	res     *Result
	rep     Reporter
	memo    map[int][]float64 // tok/s by steps, one figure per concurrency of at (-Inf: failed)
	from    *found            // the unit as the tune found it: every value is planned on it
	how     []string          // per concurrency of at: how the search went there
	// live is the steps value the service serves now, as its unit says and
	// its engine reports (-1: none usable): measured first, without a
	// restart (runningNow). 0: none usable.
	live int // 0: none
	// deploy, when set, stands in for sweepValue (deploying steps n and
	// benchmarking it at every concurrency of at): for tests only.
	deploy func(ctx context.Context, n int) (pts []SweepPoint, starts int, err error)
}

// run searches each concurrency of at in turn for its fastest steps value
// within from..to: a golden-section search at the lowest, then at each
// higher one a climb from the best value already measured, within from up
// to the value the concurrency before found. Each concurrency adds to s.how
// how the search went there (traced finds the value chosen, one for the
// trace and the proposal). An error ends the search (ctx's end, or a
// wind-down).
func (s *perLoadSearch) run(ctx context.Context, from, to int) error {
	hi := to
	for ci, c := range s.at {
		f := func(n int) (float64, error) {
			v, err := s.measure(ctx, n)
			if err != nil {
				return 0, err
			}
			return v[ci], nil
		}
		before := len(s.res.Tried)
		var err error
		lo := from
		if _, ok := s.memo[0]; ok && ci > 0 {
			lo = 0 // no speculation is measured: the climb may end there
		}
		worth := func(n int) bool { return s.worth(ci, n) }
		if ci == 0 {
			_, _, err = goldenMaxWorth(from, hi, f, worth)
		} else {
			_, err = climbMax(lo, hi, bestMeasured(s.memo, ci, lo, hi), f)
		}
		if err != nil {
			return err
		}
		found := bestMeasured(s.memo, ci, lo, hi)
		how := fmt.Sprintf("a golden-section search over %d..%d", from, hi)
		if ci > 0 {
			how = fmt.Sprintf("a climb within %d..%d from the best value measured there", lo, hi)
		}
		s.how = append(s.how, fmt.Sprintf("concurrency %d: %s, %d new values measured", c, how, len(s.res.Tried)-before))
		hi = max(found, from+1)
	}
	return nil
}

// traced is the search's line for each row: how it went there and the
// value chosen, the fastest of every value measured at that concurrency
// (the row's Steps, as the table and the proposal say it).
func (s *perLoadSearch) traced(rows []PerLoadRow) []string {
	out := make([]string, 0, len(rows))
	for i, row := range rows {
		if i < len(s.how) {
			line := fmt.Sprintf("%s; the fastest of all values measured there: %s, %s", s.how[i], StepsText(row.Steps), tokText(row.StepsTokS))
			if row.fastestTokS > 0 {
				line = fmt.Sprintf("%s; the fastest of all values measured there: %s, %s; chosen: no speculation, %s (%+.1f%%, within %.0f%%: speculation's gain there is within one benchmark's spread)",
					s.how[i], StepsText(row.fastest), tokText(row.fastestTokS), tokText(row.StepsTokS), 100*(row.StepsTokS/row.fastestTokS-1), 100*perLoadGoal)
			}
			out = append(out, line)
		}
	}
	return out
}

// measure is steps value n's tok/s at each concurrency of at (-Inf where it
// failed), measured once and then remembered. A value that fails to serve is
// not an error; ctx's end or a wind-down is.
func (s *perLoadSearch) measure(ctx context.Context, n int) ([]float64, error) {
	if v, ok := s.memo[n]; ok {
		return v, nil
	}
	if err := s.r.windDown(); err != nil {
		return nil, err
	}
	deploy := s.deploy
	if s.live > 0 && n == s.live && deploy == nil {
		deploy = s.benchLive
	}
	s.live = 0 // any start ends what ran before
	if deploy == nil {
		deploy = func(ctx context.Context, n int) ([]SweepPoint, int, error) {
			return s.r.sweepValue(ctx, s.t, s.service, Setting{Steps: n, from: s.from}, s.at, s.r.perLoadPrompts, s.res, s.rep)
		}
	}
	pts, starts, err := deploy(ctx, n)
	s.res.Restarts += starts
	s.res.Points = append(s.res.Points, pts...)
	s.res.Tried = append(s.res.Tried, n)
	v := make([]float64, len(s.at))
	for i := range v {
		v[i] = math.Inf(-1)
	}
	for _, p := range pts {
		if i := slices.Index(s.at, p.Concurrency); i >= 0 && p.OK {
			v[i] = p.OutputTokS
		}
	}
	s.memo[n] = v
	if err != nil && ctx.Err() != nil {
		return v, err
	}
	return v, nil
}

// goldenMax is the integer golden-section search over a..b for the value
// with the highest f (a failed value is -Inf); once at most three values are
// left each is measured. narrowed (may be nil) is told each step: the two
// values compared, their figures, the range searched and the range left. It
// returns the range it ended on; an error of f ends the search.
func goldenMax(a, b int, f func(int) (float64, error), narrowed func(m1 int, f1 float64, m2 int, f2 float64, from, to [2]int)) (int, int, error) {
	return goldenSearch(a, b, f, narrowed, nil)
}

// goldenMaxWorth is goldenMax that stops once no value left in the range
// is worth measuring (worth: not measured yet, and possibly faster than the
// best measured by more than the noise), and at the end measures only
// those that are.
func goldenMaxWorth(a, b int, f func(int) (float64, error), worth func(int) bool) (int, int, error) {
	return goldenSearch(a, b, f, nil, worth)
}

func goldenSearch(a, b int, f func(int) (float64, error), narrowed func(m1 int, f1 float64, m2 int, f2 float64, from, to [2]int), worth func(int) bool) (int, int, error) {
	if worth == nil {
		worth = func(int) bool { return true }
	}
	for b-a > 2 {
		if !slices.ContainsFunc(seqInts(a, b), worth) {
			return a, b, nil
		}
		step := max(1, int(math.Round(float64(b-a)*golden)))
		m1, m2 := a+step, b-step
		if m1 >= m2 {
			m2 = m1 + 1
		}
		f1, err := f(m1)
		if err != nil {
			return a, b, err
		}
		f2, err := f(m2)
		if err != nil {
			return a, b, err
		}
		from := [2]int{a, b}
		if f1 < f2 {
			a = m1
		} else {
			b = m2
		}
		if narrowed != nil {
			narrowed(m1, f1, m2, f2, from, [2]int{a, b})
		}
	}
	for n := a; n <= b; n++ {
		if !worth(n) {
			continue
		}
		if _, err := f(n); err != nil {
			return a, b, err
		}
	}
	return a, b, nil
}

// seqInts is a..b.
func seqInts(a, b int) []int {
	out := make([]int, 0, max(b-a+1, 0))
	for n := a; n <= b; n++ {
		out = append(out, n)
	}
	return out
}

// bestMeasured is the steps value in lo..hi with the highest figure at
// concurrency index ci among those measured (lo when none is).
func bestMeasured(memo map[int][]float64, ci, lo, hi int) int {
	best, bestV := lo, math.Inf(-1)
	for n := lo; n <= hi; n++ {
		if v, ok := memo[n]; ok && v[ci] > bestV {
			best, bestV = n, v[ci]
		}
	}
	return best
}

// climbMax climbs from start to a local maximum of f within lo..hi: it
// measures the neighbours of the current value and moves to the better one
// until neither is better by more than PerLoadNoise (values that close are
// the same to a benchmark, and the proposal offers them as candidates).
// Throughput over steps has one peak: from a value near it a few neighbours
// settle it.
func climbMax(lo, hi, start int, f func(int) (float64, error)) (int, error) {
	cur := start
	v, err := f(cur)
	if err != nil {
		return 0, err
	}
	for {
		next, nextV := cur, v
		for _, n := range []int{cur - 1, cur + 1} {
			if n < lo || n > hi {
				continue
			}
			w, err := f(n)
			if err != nil {
				return 0, err
			}
			if w > nextV && w > v*(1+PerLoadNoise) {
				next, nextV = n, w
			}
		}
		if next == cur {
			return cur, nil
		}
		cur, v = next, nextV
	}
}

// perLoadRows builds the rows from the measurements: the best steps at each
// concurrency (0, no speculation, included), its near-best candidates, its
// own tok/s there, the best single setting (the one with the highest mean
// tok/s relative to each best) and no speculation. The configuration's own
// figures and the gains come when it is measured (measuredAt). nil when some
// concurrency has no successful value.
func perLoadRows(at []int, memo map[int][]float64) *PerLoad {
	steps := make([]int, 0, len(memo))
	for n := range memo {
		steps = append(steps, n)
	}
	sort.Ints(steps)
	pl := &PerLoad{}
	bests := make([]float64, len(at))
	for ci, c := range at {
		row := PerLoadRow{Concurrency: c, StepsTokS: math.Inf(-1)}
		for _, n := range steps {
			if v := memo[n][ci]; v > row.StepsTokS {
				row.Steps, row.StepsTokS = n, v
			}
		}
		if math.IsInf(row.StepsTokS, -1) {
			return nil
		}
		bests[ci] = row.StepsTokS
		row.Candidates = nearBest(steps, memo, ci, row.Steps)
		pl.Rows = append(pl.Rows, row)
	}
	preferNone(pl.Rows, memo)
	bestMean := math.Inf(-1)
	for _, n := range steps {
		mean := 0.0
		for ci := range at {
			mean += memo[n][ci] / bests[ci]
		}
		if mean > bestMean {
			pl.Single, bestMean = n, mean
		}
	}
	for ci := range pl.Rows {
		pl.Rows[ci].SingleTokS = known(memo[pl.Single][ci])
		if v, ok := memo[0]; ok {
			pl.Rows[ci].NoSpecTokS = known(v[ci])
		}
	}
	return pl
}

// preferNone makes the top loads of rows no speculation alone (steps 0, its
// only candidate) where no speculation measured within perLoadGoal of the
// fastest value there: from the highest load down, as long as it holds at
// each. The rule, noise-robust: at those loads speculation measured no gain
// beyond one benchmark's spread, and verify work grows with draft tokens x
// batch, so a faster figure there is as likely noise as gain; no speculation
// costs at most perLoadGoal against the fastest measured, and it is the one
// choice that cannot fall below no speculation. Lower loads keep their
// fastest value (there speculation wins by far more than the spread). Each
// row changed keeps the fastest value and its figure in fastest/fastestTokS
// for the trace.
func preferNone(rows []PerLoadRow, memo map[int][]float64) {
	none, ok := memo[0]
	if !ok {
		return
	}
	for ci := len(rows) - 1; ci >= 0; ci-- {
		row := &rows[ci]
		if row.Steps == 0 {
			row.Candidates = []int{0}
			continue
		}
		if math.IsInf(none[ci], -1) || none[ci] < row.StepsTokS*(1-perLoadGoal) {
			return
		}
		row.fastest, row.fastestTokS = row.Steps, row.StepsTokS
		row.Steps, row.StepsTokS, row.Candidates = 0, none[ci], []int{0}
	}
}

// nearBest is best, then the other values measured within PerLoadNoise of
// it at concurrency index ci, fastest first, perLoadCandidates at most.
func nearBest(steps []int, memo map[int][]float64, ci, best int) []int {
	type near struct {
		n int
		v float64
	}
	top := memo[best][ci]
	var ns []near
	for _, n := range steps {
		if v := memo[n][ci]; n != best && v >= top*(1-PerLoadNoise) {
			ns = append(ns, near{n, v})
		}
	}
	sort.SliceStable(ns, func(i, j int) bool { return ns[i].v > ns[j].v })
	out := []int{best}
	for _, x := range ns[:min(len(ns), perLoadCandidates-1)] {
		out = append(out, x.n)
	}
	return out
}

// known is v, or nil when it was not measured (-Inf, NaN).
func known(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

// gainPct is the gain of v over base in percent, nil when either is unknown
// or base is not above 0.
func gainPct(v, base *float64) *float64 {
	if v == nil || base == nil || *base <= 0 {
		return nil
	}
	g := 100 * (*v / *base - 1)
	return &g
}

// runningNow is the steps value the service serves now when a per-load tune
// can measure it without a restart (0 otherwise): a static steps value of
// from..to (SGLang, not per load), which the engine reports running
// (/server_info's steps, topk and draft tokens as the unit has them).
func (s *perLoadSearch) runningNow(ctx context.Context, d *deployed, from, to int) int {
	sp, err := d.eff.Spec()
	if err != nil || unitEngine(d) == "vllm" || !sp.Present || sp.Adaptive {
		return 0
	}
	n := sp.DraftSteps()
	if n < max(from, 1) || n > to {
		return 0
	}
	info, err := s.t.eng.ServerInfo(ctx)
	if err != nil || info.Steps != n || (sp.TopK > 0 && info.TopK != sp.TopK) || (sp.DraftTokens > 0 && info.DraftTokens != sp.DraftTokens) {
		return 0
	}
	if on, _ := info.Raw["speculative_adaptive"].(bool); on {
		return 0
	}
	return n
}

// benchLive benchmarks steps n, which the service serves now
// (runningNow), at every concurrency without a restart.
func (s *perLoadSearch) benchLive(ctx context.Context, n int) ([]SweepPoint, int, error) {
	sub := &Result{Incidents: []string{}}
	if err := s.r.readSpec(ctx, s.t, sub, prefixed(s.rep, "running now: ")); err != nil {
		return nil, 0, err
	}
	set := Setting{Steps: n, from: s.from}
	pts, err := s.r.benchEach(ctx, s.t, set, s.at, s.r.perLoadPrompts, sub, s.res, prefixed(s.rep, "running now: "))
	return pts, 0, err
}

// worth says whether steps value n, not measured yet, could be faster at
// concurrency index ci than the best value measured there by more than
// PerLoadNoise, and so is worth a restart to the golden-section search (the
// climbs measure both neighbours regardless: noise can flatten a peak). Near its peak throughput over
// steps is concave (the accept length saturates while a step's cost grows
// with each draft token): a value lies below the line through the two
// measured values nearest it on either side, extended to it. Where a side
// has fewer than two measured values, nothing bounds it: worth measuring.
// No speculation (0) is no point of that curve (no draft model at all) and
// bounds nothing.
func (s *perLoadSearch) worth(ci, n int) bool {
	if _, ok := s.memo[n]; ok {
		return false
	}
	var pts []int
	best := math.Inf(-1)
	for m, v := range s.memo {
		if !math.IsInf(v[ci], -1) {
			best = max(best, v[ci])
			if m > 0 {
				pts = append(pts, m)
			}
		}
	}
	sort.Ints(pts)
	i, _ := slices.BinarySearch(pts, n)
	bound := math.Inf(1)
	at := func(m int) float64 { return s.memo[m][ci] }
	if i >= 2 {
		a, b := pts[i-2], pts[i-1]
		bound = min(bound, at(b)+(at(b)-at(a))/float64(b-a)*float64(n-b))
	}
	if i+1 < len(pts) {
		a, b := pts[i], pts[i+1]
		bound = min(bound, at(a)-(at(b)-at(a))/float64(b-a)*float64(a-n))
	}
	return bound > best*(1+PerLoadNoise)
}
