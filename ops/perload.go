package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/ops/systemd"
	"github.com/opsbot/opsbot/ops/unit"
)

// PerLoadOptions are `mtp tune SERVICE per-load at LIST [RANGE]`: the
// concurrencies to tune for and the steps searched.
type PerLoadOptions struct {
	At       []int // concurrencies, at least two, each once
	From, To int   // the steps values searched, From < To
	DryRun   bool
}

// PerLoadNoise is how close (relative) a steps value's tok/s must be to the
// best at a concurrency to be offered to the engine as a candidate there.
const PerLoadNoise = 0.02

// perLoadCandidates caps the candidates of one slot.
const perLoadCandidates = 3

// sglangSpecCap is SGLang's running-request cap with speculation on, unless
// --max-running-requests is set (server_args.py, "Max running requests is
// reset to 48 for speculative decoding").
const sglangSpecCap = 48

// PerLoadRow is one concurrency of a per-load proposal.
type PerLoadRow struct {
	Concurrency int `json:"concurrency"`
	// Steps is the fastest steps value measured at this concurrency;
	// Candidates the values within PerLoadNoise of it (Steps first), which
	// the engine may move between (SGLang's candidate_steps).
	Steps      int     `json:"steps"`
	Candidates []int   `json:"candidates"`
	OutputTokS float64 `json:"output_tok_s"`
	AcceptLen  float64 `json:"accept_len,omitempty"`
	AcceptRate float64 `json:"accept_rate,omitempty"`
	// SingleTokS is the best single setting's tok/s here; GainPct the
	// per-load setting's gain over it.
	SingleTokS float64 `json:"single_tok_s"`
	GainPct    float64 `json:"gain_pct"`
	// Queued is how many of the concurrent requests wait for a slot: SGLang
	// runs at most 48 with speculation unless --max-running-requests is set.
	Queued int `json:"queued,omitempty"`
}

// PerLoad is a per-load proposal: what was measured and the engine's own
// per-load form of it.
type PerLoad struct {
	Engine string       `json:"engine"`
	Rows   []PerLoadRow `json:"rows"`
	// Single is the best single steps value over all the concurrencies (the
	// highest mean tok/s relative to each concurrency's best).
	Single int `json:"single"`
	// Steps is the unit's --speculative-num-steps (SGLang: the first slot's
	// best, one of the candidates as SGLang requires) or num_speculative_tokens
	// (vLLM: the table's largest k).
	Steps int `json:"steps"`
	// File and FileText are SGLang's adaptive config: its path on the host
	// and its JSON; Table is vLLM's num_speculative_tokens_per_batch_size.
	File     string      `json:"file,omitempty"`
	FileText string      `json:"file_text,omitempty"`
	Table    string      `json:"table,omitempty"`
	Unit     *UnitChange `json:"unit,omitempty"`
	// GridRestarts is what the full grid of the range at these concurrencies
	// would restart (one per steps value).
	GridRestarts int `json:"grid_restarts"`
	// Apply is the command that deploys the proposal.
	Apply string `json:"apply"`
}

// TunePerLoad is `mtp tune SERVICE per-load at LIST [RANGE]`: it finds the
// fastest steps value at each concurrency of o.At with few restarts and
// proposes the engine's own per-load form of them, changing nothing but the
// steps it measures with. Each steps value tried is deployed once through
// the mtp steps pipeline and benchmarked at every concurrency on that start.
// The search: a golden-section search (as Tune) at the lowest concurrency
// over o.From..o.To, then at each higher concurrency a climb to the nearest
// peak from the best value already measured within o.From up to the value
// the concurrency before found (throughput over steps has one peak at each
// load, and it moves down as the load grows: verify work grows with draft
// tokens x batch); every value measured is reused at every concurrency, and
// each row of the proposal is the best value measured at its concurrency. Result.PerLoad holds the proposal: SGLang's adaptive config (a
// slot per concurrency, candidate_steps the values within PerLoadNoise of the
// best) at the service's adaptive_config path and the unit flags that enable
// it, or vLLM's per-batch table inside --speculative-config; with the gain
// at each concurrency over the best single setting. Afterwards the service
// is put back on the steps it ran (its default_steps when set). A cancel
// stops it where it is (Result.Left says where).
func (r *Runbook) TunePerLoad(ctx context.Context, service string, o PerLoadOptions, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}, Metric: MetricOutputTokS}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	at := slices.Clone(o.At)
	slices.Sort(at)
	if len(slices.Compact(at)) != len(o.At) || len(at) < 2 || at[0] < 1 {
		return res, fmt.Errorf("tune %s per load: give two concurrencies or more, each once (e.g. at 1,8,32,64), got %s", service, intList(o.At))
	}
	if o.From < 1 || o.To <= o.From {
		return res, fmt.Errorf("tune %s per load: the range %d..%d must go up and hold two values at least", service, o.From, o.To)
	}
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, err
	}
	sp, err := d.eff.Spec()
	if err != nil {
		return res, err
	}
	engine := unitEngine(d)
	// Refuse before anything changes: each end of the range, and the form the
	// proposal will take (SGLang: EAGLE with topk 1; a path to write).
	for _, n := range []int{o.From, o.To} {
		if _, err := r.plan(t, d, Setting{Steps: n}); err != nil {
			return res, fmt.Errorf("steps %d: %w", n, err)
		}
	}
	if engine != "vllm" && t.cfg.AdaptiveConfig == "" {
		return res, fmt.Errorf("tune %s per load: services.%s.adaptive_config is not set: no path for SGLang's adaptive config", service, service)
	}
	if _, err := r.perLoadPlan(t, d, engine, []PerLoadRow{{Concurrency: 1, Steps: o.From, Candidates: []int{o.From}}}); err != nil {
		return res, err
	}
	home := Setting{Steps: sp.DraftSteps()}
	if t.cfg.DefaultSteps > 0 {
		home.Steps = t.cfg.DefaultSteps
	}
	grid := o.To - o.From + 1
	if o.DryRun {
		res.Summary = fmt.Sprintf("dry run: would search steps %d..%d on %s at concurrency %s (each value tried is one restart, "+
			"benchmarked at every concurrency; the full grid needs %d), propose a per-load configuration and leave %s on %s",
			o.From, o.To, service, intList(at), grid, service, home)
		return res, nil
	}
	// memo: tok/s by steps, one figure per concurrency of at.
	memo := map[int][]float64{}
	measure := func(n int) ([]float64, error) {
		if v, ok := memo[n]; ok {
			return v, nil
		}
		if err := r.windDown(); err != nil {
			return nil, err
		}
		pts, restarted, err := r.sweepValue(ctx, t, service, Setting{Steps: n}, at, res, rep)
		if restarted {
			res.Restarts++
		}
		res.Points = append(res.Points, pts...)
		res.Tried = append(res.Tried, n)
		v := make([]float64, len(at))
		for i := range v {
			v[i] = math.Inf(-1)
		}
		for _, p := range pts {
			if i := slices.Index(at, p.Concurrency); i >= 0 && p.OK {
				v[i] = p.OutputTokS
			}
		}
		memo[n] = v
		if err != nil && ctx.Err() != nil {
			return v, err
		}
		return v, nil
	}
	hi := o.To
	for ci, c := range at {
		f := func(n int) (float64, error) {
			v, err := measure(n)
			if err != nil {
				return 0, err
			}
			return v[ci], nil
		}
		before := len(res.Tried)
		var err error
		if ci == 0 {
			_, _, err = goldenMax(o.From, hi, f, nil)
		} else {
			_, err = climbMax(o.From, hi, bestMeasured(memo, ci, o.From, hi), f)
		}
		if err != nil {
			return res, r.perLoadLeave(ctx, service, home, res, rep, err)
		}
		found := bestMeasured(memo, ci, o.From, hi)
		how := fmt.Sprintf("a golden-section search over %d..%d", o.From, hi)
		if ci > 0 {
			how = fmt.Sprintf("a climb within %d..%d from the best value measured there", o.From, hi)
		}
		res.Details = append(res.Details, fmt.Sprintf("concurrency %d: %s found steps %d (%s); %d new values measured",
			c, how, found, tokText(memo[found][ci]), len(res.Tried)-before))
		hi = max(found, o.From+1)
	}
	pl := perLoadRows(at, memo, res.Points)
	if pl == nil {
		return res, r.perLoadLeave(ctx, service, home, res, rep, fmt.Errorf("no value tried served at every concurrency: %s", intList(res.Tried)))
	}
	pl.Engine, pl.GridRestarts = engine, grid
	if engine != "vllm" && !hasFlag(d.eff.Argv(), "--max-running-requests") {
		for i := range pl.Rows {
			pl.Rows[i].Queued = max(pl.Rows[i].Concurrency-sglangSpecCap, 0)
		}
	}
	if err := r.perLoadLeave(ctx, service, home, res, rep, nil); err != nil {
		return res, err
	}
	// Plan against the unit as it is now (the service is back on home).
	d, err = r.readUnit(ctx, t)
	if err != nil {
		return res, err
	}
	prop, err := r.perLoadPlan(t, d, engine, pl.Rows)
	if err != nil {
		return res, fmt.Errorf("measured, but the proposal cannot be written: %w", err)
	}
	if err := readBeside(ctx, t, prop.planned); err != nil {
		return res, fmt.Errorf("measured, but: %w", err)
	}
	pl.Steps, pl.File, pl.FileText, pl.Table, pl.Unit = prop.steps, prop.file, prop.fileText, prop.table, prop.unit
	pl.Unit.Files = prop.planned.files
	pl.Apply = fmt.Sprintf("mtp per-load %s %s", service, perLoadWords(pl.Rows))
	res.PerLoad = pl
	res.Details = append(res.Details, pl.Report()...)
	res.Summary = fmt.Sprintf("mtp tune %s per load at %s: %s; %d restarts for %d values (the full grid: %d); proposed, not applied: `%s` applies it",
		service, intList(at), pl.Brief(), res.Restarts, len(res.Tried), grid, pl.Apply)
	return res, nil
}

// perLoadLeave puts the service back on home after the measurements; cause
// (may be nil) is the error that ended them.
func (r *Runbook) perLoadLeave(ctx context.Context, service string, home Setting, res *Result, rep Reporter, cause error) error {
	if ctx.Err() != nil {
		return cause
	}
	if _, err := r.settle(ctx, service, home, fmt.Sprintf("leave on %s: ", home), res, rep); err != nil {
		if cause != nil {
			return fmt.Errorf("%w; putting %s back on %s also failed: %v", cause, service, home, err)
		}
		return fmt.Errorf("measured, but putting %s back on %s failed: %w", service, home, err)
	}
	return cause
}

// goldenMax is the integer golden-section search over a..b for the value
// with the highest f (a failed value is -Inf); once at most three values are
// left each is measured. narrowed (may be nil) is told each step: the two
// values compared, their figures, the range searched and the range left. It
// returns the range it ended on; an error of f ends the search.
func goldenMax(a, b int, f func(int) (float64, error), narrowed func(m1 int, f1 float64, m2 int, f2 float64, from, to [2]int)) (int, int, error) {
	for b-a > 2 {
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
		if _, err := f(n); err != nil {
			return a, b, err
		}
	}
	return a, b, nil
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
// concurrency, its near-best candidates, and the gain over the best single
// setting (the one with the highest mean tok/s relative to each best). nil
// when some concurrency has no successful value.
func perLoadRows(at []int, memo map[int][]float64, pts []SweepPoint) *PerLoad {
	steps := make([]int, 0, len(memo))
	for n := range memo {
		steps = append(steps, n)
	}
	sort.Ints(steps)
	pl := &PerLoad{}
	bests := make([]float64, len(at))
	for ci, c := range at {
		row := PerLoadRow{Concurrency: c, OutputTokS: math.Inf(-1)}
		for _, n := range steps {
			if v := memo[n][ci]; v > row.OutputTokS {
				row.Steps, row.OutputTokS = n, v
			}
		}
		if math.IsInf(row.OutputTokS, -1) {
			return nil
		}
		bests[ci] = row.OutputTokS
		row.Candidates = []int{row.Steps}
		type near struct {
			n int
			v float64
		}
		var ns []near
		for _, n := range steps {
			if v := memo[n][ci]; n != row.Steps && v >= row.OutputTokS*(1-PerLoadNoise) {
				ns = append(ns, near{n, v})
			}
		}
		sort.Slice(ns, func(i, j int) bool { return ns[i].v > ns[j].v })
		for _, x := range ns[:min(len(ns), perLoadCandidates-1)] {
			row.Candidates = append(row.Candidates, x.n)
		}
		for _, p := range pts {
			if p.OK && p.Steps == row.Steps && p.Concurrency == c {
				row.AcceptLen, row.AcceptRate = p.AcceptLen, p.AcceptRate
			}
		}
		pl.Rows = append(pl.Rows, row)
	}
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
		row := &pl.Rows[ci]
		row.SingleTokS = memo[pl.Single][ci]
		if row.SingleTokS > 0 {
			row.GainPct = 100 * (row.OutputTokS/row.SingleTokS - 1)
		}
	}
	return pl
}

// perLoadProposal is the engine's per-load form of some rows.
type perLoadProposal struct {
	steps          int
	file, fileText string
	table          string
	unit           *UnitChange
	planned        *planned // the unit edit, with the file beside it (its Before read at deploy)
}

// perLoadPlan renders rows in the engine's per-load form and plans the unit
// edit that runs it; the unit edit's refusals (an algorithm or topk SGLang's
// adaptive mode does not run, an odd path) come back as errors.
func (r *Runbook) perLoadPlan(t *target, d *deployed, engine string, rows []PerLoadRow) (*perLoadProposal, error) {
	p := &perLoadProposal{}
	var opts unit.Options
	if engine == "vllm" {
		p.table, p.steps = VLLMBatchTable(rows)
		opts.BatchTable = p.table
	} else {
		p.file, p.fileText = t.cfg.AdaptiveConfig, SGLangAdaptiveConfig(rows)
		p.steps = rows[0].Steps
		opts.AdaptiveConfig = p.file
		opts.MaxRunningRequests = capNeeded(rows)
	}
	pl, err := r.planWith(t, d, p.steps, opts)
	if err != nil {
		return nil, err
	}
	if p.file != "" {
		pl.files = []FileChange{{Path: p.file, After: p.fileText}}
	}
	p.planned = pl
	e := pl.edit
	p.unit = &UnitChange{Path: pl.path, Before: pl.before, After: pl.after, ArgvBefore: e.ArgvBefore, ArgvAfter: e.ArgvAfter, Diff: e.Diff}
	if pl.path != e.File {
		p.unit.Diff = unit.UnifiedDiff(pl.path, pl.before, pl.after)
	}
	return p, nil
}

// capNeeded is the --max-running-requests a SGLang per-load table needs: the
// largest concurrency when some row above SGLang's cap of 48 (with
// speculation on) keeps speculation on there (steps above 0), else 0. The
// unit edit adds it only when the unit does not set the option itself.
func capNeeded(rows []PerLoadRow) int {
	for _, row := range rows {
		if row.Concurrency > sglangSpecCap && row.Steps > 0 {
			return rows[len(rows)-1].Concurrency
		}
	}
	return 0
}

// raisesCap is the --max-running-requests value a unit change adds (0 when it
// adds none).
func raisesCap(u *UnitChange) int {
	if u == nil || hasFlag(u.ArgvBefore, unit.FlagMaxRunning) {
		return 0
	}
	for i, a := range u.ArgvAfter {
		if v, ok := strings.CutPrefix(a, unit.FlagMaxRunning+"="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
		if a == unit.FlagMaxRunning && i+1 < len(u.ArgvAfter) {
			n, _ := strconv.Atoi(u.ArgvAfter[i+1])
			return n
		}
	}
	return 0
}

// withinCap is rows without those above SGLang's cap of 48: with at most 48
// requests running, their slots are never used.
func withinCap(rows []PerLoadRow) []PerLoadRow {
	var out []PerLoadRow
	for _, row := range rows {
		if row.Concurrency <= sglangSpecCap {
			out = append(out, row)
		}
	}
	return out
}

// SGLangAdaptiveConfig renders rows as SGLang's adaptive config (the format
// of sgl-project/sglang 015c8726, srt/speculative/adaptive_spec_params.py):
// one slot per concurrency, keyed by it as a string, its candidate_steps the
// row's candidates ascending; the engine runs a batch with the slot of the
// largest key not above its (CUDA-graph padded) size. One slot a line, keys
// ascending, a final newline.
func SGLangAdaptiveConfig(rows []PerLoadRow) string {
	var b strings.Builder
	b.WriteString("{\n")
	for i, row := range rows {
		c := slices.Clone(row.Candidates)
		slices.Sort(c)
		fmt.Fprintf(&b, "  %q: {\"candidate_steps\": [%s]}", strconv.Itoa(row.Concurrency), joinInts(c, ", "))
		if i < len(rows)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// vllmTableTop is the largest batch size the last entry of a vLLM table
// covers (a batch no entry covers runs num_speculative_tokens).
const vllmTableTop = 1024

// VLLMBatchTable renders rows as vLLM's num_speculative_tokens_per_batch_size
// (compact JSON, no spaces: [[lo,hi,k],...]): each concurrency's best steps
// from it up to the next concurrency less one, the first from 1, the last up
// to 1024; and num_speculative_tokens, the largest k (vLLM clamps every k to
// it).
func VLLMBatchTable(rows []PerLoadRow) (table string, maxK int) {
	parts := make([]string, len(rows))
	for i, row := range rows {
		lo, hi := row.Concurrency, vllmTableTop
		if i == 0 {
			lo = 1
		}
		if i+1 < len(rows) {
			hi = rows[i+1].Concurrency - 1
		}
		parts[i] = fmt.Sprintf("[%d,%d,%d]", lo, max(hi, lo), row.Steps)
		maxK = max(maxK, row.Steps)
	}
	return "[" + strings.Join(parts, ",") + "]", maxK
}

// queuedNote says how many requests queue at the concurrencies of at above
// SGLang's cap with speculation on (for a unit without
// --max-running-requests), and the flag that lifts it; "" when none does.
func queuedNote(at []int) string {
	var parts []string
	top := 0
	for _, c := range at {
		if c > sglangSpecCap {
			parts = append(parts, fmt.Sprintf("%d of %d at concurrency %d", c-sglangSpecCap, c, c))
			top = max(top, c)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("Requests queued: %s. SGLang runs at most %d requests at once with speculation on; "+
		"--max-running-requests %d in the unit lets them all run, if the GPUs' memory allows it.", strings.Join(parts, ", "), sglangSpecCap, top)
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

func hasFlag(argv []string, flag string) bool {
	for _, a := range argv {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// Brief is the proposal in one line: "1: steps 10, 8: steps 7, ...".
func (p *PerLoad) Brief() string {
	parts := make([]string, len(p.Rows))
	for i, row := range p.Rows {
		parts[i] = fmt.Sprintf("%d: steps %d (%+.1f%%)", row.Concurrency, row.Steps, row.GainPct)
	}
	return strings.Join(parts, ", ")
}

// Report is the proposal for the result block: the table per concurrency,
// the gain against the best single setting, the unit's diff and the file.
func (p *PerLoad) Report() []string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s  %-10s  %9s  %10s  %6s  %-22s  %s\n", "concurrency", "steps", "tok/s", "accept len", "rate", "best single (steps "+strconv.Itoa(p.Single)+")", "gain")
	for _, row := range p.Rows {
		steps := strconv.Itoa(row.Steps)
		if len(row.Candidates) > 1 {
			c := slices.Clone(row.Candidates)
			slices.Sort(c)
			steps += " (" + joinInts(c, ",") + ")"
		}
		al, rate := "-", "-"
		if row.AcceptLen > 0 {
			al, rate = fmt.Sprintf("%.2f", row.AcceptLen), fmt.Sprintf("%.0f%%", 100*row.AcceptRate)
		}
		fmt.Fprintf(&b, "%-11d  %-10s  %9.1f  %10s  %6s  %22.1f  %+.1f%%\n", row.Concurrency, steps, row.OutputTokS, al, rate, row.SingleTokS, row.GainPct)
	}
	out := []string{strings.TrimRight(b.String(), "\n")}
	var queued []int
	for _, row := range p.Rows {
		if row.Queued > 0 {
			queued = append(queued, row.Concurrency)
		}
	}
	if note := queuedNote(queued); note != "" {
		out = append(out, note)
	}
	if n := raisesCap(p.Unit); n > 0 {
		out = append(out, fmt.Sprintf("The proposal raises the cap: %s %d (in the unit's diff). Its CUDA graphs grow with it: if they do not fit "+
			"in GPU memory the apply rolls back and gives the command without it.", unit.FlagMaxRunning, n))
	}
	if p.Unit != nil && p.Unit.Diff != "" {
		out = append(out, p.Unit.Diff)
	}
	if p.Unit != nil {
		out = append(out, filesText(p.Unit.Files)...)
	}
	if p.Table != "" {
		out = append(out, "--speculative-config gets num_speculative_tokens_per_batch_size "+p.Table)
	}
	return out
}

// unitEngine is the engine the unit launches: "sglang" or "vllm".
func unitEngine(d *deployed) string {
	if d.eff.Detection.Engine == unit.VLLM {
		return "vllm"
	}
	return "sglang"
}

// perLoadWords renders rows as mtp per-load's TABLE: "1:7 8:6 32:2 64:2/3"
// (a concurrency, its steps, then its other candidates).
func perLoadWords(rows []PerLoadRow) string {
	parts := make([]string, len(rows))
	for i, row := range rows {
		c := []int{row.Steps}
		for _, n := range row.Candidates {
			if n != row.Steps {
				c = append(c, n)
			}
		}
		parts[i] = fmt.Sprintf("%d:%s", row.Concurrency, joinInts(c, "/"))
	}
	return strings.Join(parts, " ")
}

// filesChange reports whether some file beside the unit changes.
func (p *planned) filesChange() bool {
	for _, f := range p.files {
		if f.Created || f.Removed || f.Before != f.After {
			return true
		}
	}
	return false
}

// readBeside reads the present text of the files p writes beside the unit
// (Before; Created when a file does not exist), and their diffs.
func readBeside(ctx context.Context, t *target, p *planned) error {
	for i := range p.files {
		f := &p.files[i]
		b, err := t.host.ReadFile(ctx, f.Path)
		switch {
		case err != nil && errors.Is(err, fs.ErrNotExist):
			f.Before, f.Created = "", true
		case err != nil:
			return hostErr("read "+f.Path, t.cfg.Host, err)
		default:
			f.Before = string(b)
		}
		if f.Before != f.After {
			f.Diff = unit.UnifiedDiff(f.Path, f.Before, f.After)
		}
	}
	return nil
}

// writeBesideFiles writes the files beside the unit: their After text for
// UnitNew (removing a file the change removes), their Before text for
// UnitOld (removing a file the change created). Each write is atomic (a
// temporary file renamed over it), so a file is always its old or its new
// text.
func writeBesideFiles(ctx context.Context, t *target, p *planned, which string) error {
	for _, f := range p.files {
		if f.Before == f.After && !f.Created && !f.Removed {
			continue
		}
		if (which == UnitOld && f.Created) || (which == UnitNew && f.Removed) {
			if err := runOK(ctx, t, "rm", "-f", f.Path); err != nil {
				return err
			}
			continue
		}
		text := f.After
		if which == UnitOld {
			text = f.Before
		}
		if err := runOK(ctx, t, "mkdir", "-p", path.Dir(f.Path)); err != nil {
			return err
		}
		if err := t.host.WriteFileAtomic(ctx, f.Path, []byte(text), 0o644); err != nil {
			return hostErr("write "+f.Path, t.cfg.Host, err)
		}
	}
	return nil
}

// filesText describes the files beside the unit a change writes: their diffs,
// or that one goes.
func filesText(fs []FileChange) []string {
	var out []string
	for _, f := range fs {
		switch {
		case f.Removed:
			out = append(out, "removes "+f.Path)
		case f.Diff != "":
			out = append(out, f.Diff)
		}
	}
	return out
}

// ApplyPerLoad is `mtp per-load [SERVICE] TABLE`: it deploys the engine's
// per-load form of rows (the TABLE a per-load tune proposes) through the mtp
// steps pipeline: stop, clear the GPUs, write SGLang's adaptive config file
// (atomically, at services.NAME.adaptive_config) and then the unit (or, for
// vLLM, the unit with its per-batch table), daemon-reload, start, wait until
// ready, verify that the engine runs it (/server_info's
// speculative_adaptive and its config path; vLLM's draft positions), then
// benchmark at each concurrency of the rows. When the new unit cannot be made
// to serve or does not run per load, the unit and the file are both put back
// (a file the change created is removed) and started again; `mtp undo`
// restores both. rows: ascending concurrencies, each with its steps first in
// Candidates or alone; SGLang starts at the first row's steps. For SGLang, a
// row above its cap of 48 running requests with speculation that keeps
// speculation on (steps above 0) makes the unit raise the cap to the largest
// concurrency (--max-running-requests N, added when the unit does not set
// it); when that start runs out of GPU memory the change is rolled back as
// any other and the error gives the command that applies the table without
// the raise (the rows up to 48). Each benchmark line says how many requests
// queued at its concurrency (SGLang's /server_info max_running_requests).
func (r *Runbook) ApplyPerLoad(ctx context.Context, service string, rows []PerLoadRow, dryRun bool, rep Reporter) (*Result, error) {
	if err := checkRows(rows); err != nil {
		return &Result{Incidents: []string{}}, fmt.Errorf("mtp per-load %s: %w; nothing was changed", service, err)
	}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	if t.cfg.AdaptiveConfig == "" && t.cfg.Engine != "vllm" {
		return &Result{Incidents: []string{}}, fmt.Errorf("mtp per-load %s: services.%s.adaptive_config is not set; nothing was changed", service, service)
	}
	set := Setting{Steps: rows[0].Steps, perLoad: &perLoadSet{rows}}
	res, err := r.mtpSet(ctx, service, set, dryRun, false, rep)
	if err != nil && res != nil && res.did.restored {
		err = capDidNotFit(service, rows, res, err)
	}
	if err != nil || dryRun {
		return res, err
	}
	at := make([]int, len(rows))
	for i, row := range rows {
		at[i] = row.Concurrency
	}
	// SGLang says how many requests it runs at once: those above queue.
	running := 0
	if res.Spec != nil && res.Spec.Engine != unit.VLLM {
		if info, err := t.eng.ServerInfo(ctx); err == nil {
			if v, ok := info.Raw["max_running_requests"].(json.Number); ok {
				if n, err := v.Int64(); err == nil {
					running = int(n)
				}
			}
		}
	}
	var lines []string
	for _, c := range at {
		if err := r.windDown(); err != nil {
			return res, fmt.Errorf("benchmarks stopped: %w; %s serves the per-load configuration", err, service)
		}
		res.Bench = nil
		bp := commands.BenchParams{Concurrency: c, Prompts: max(c, r.withBenchDefaults(commands.BenchParams{}).Prompts)}
		b, err := r.benchmark(ctx, t, bp, res, prefixed(rep, fmt.Sprintf("at %d: ", c)))
		pt := SweepPoint{Steps: set.Steps, Concurrency: c, OK: err == nil, Spec: res.Spec}
		if res.Bench != nil {
			pt.Bench = res.Bench
			pt.OutputTokS, pt.PerStreamTokS, pt.AcceptLen, pt.AcceptRate = res.Bench.OutputTokS, res.Bench.PerStreamTokS, res.Bench.AcceptLen, res.Bench.AcceptRate
		}
		if err != nil {
			pt.Error = err.Error()
			res.AddIncident(IncidentBenchFailed)
			if ctx.Err() != nil {
				return res, err
			}
		}
		res.Points = append(res.Points, pt)
		line := fmt.Sprintf("concurrency %d: %s", c, b)
		switch {
		case running > 0 && c > running:
			line += fmt.Sprintf("; %d of %d requests queued (the engine runs at most %d at once)", c-running, c, running)
		case running > 0:
			line += fmt.Sprintf("; no requests queued (the engine runs up to %d at once)", running)
		}
		lines = append(lines, line)
	}
	res.Details = append(res.Details, lines...)
	res.Summary = fmt.Sprintf("%s now runs per load (%s); `mtp undo %s` puts back the unit and the file", service, perLoadWords(rows), service)
	return res, nil
}

// capDidNotFit is err of a per-load change that was rolled back and serves
// again, saying, when it raised SGLang's running-request cap and the start
// ran out of GPU memory on clear GPUs (settings_do_not_fit), that the raised
// cap did not fit (SGLang captures CUDA graphs for batches up to it) and the
// command that applies the table without it; else err as it is.
func capDidNotFit(service string, rows []PerLoadRow, res *Result, err error) error {
	n := raisesCap(res.Unit)
	var se *StartError
	if n == 0 || !errors.As(err, &se) || se.Diag.Cause != systemd.CauseSettingsDoNotFit {
		return err
	}
	msg := fmt.Sprintf("%v. The raised cap %s %d did not fit in GPU memory (SGLang captures CUDA graphs for batches up to it, each as wide as the largest candidate steps + 1)",
		err, unit.FlagMaxRunning, n)
	if within := withinCap(rows); len(within) > 0 {
		msg += fmt.Sprintf(": apply the table without it, keeping SGLang's cap of %d (the slots above %d are then never used): `mtp per-load %s %s`",
			sglangSpecCap, sglangSpecCap, service, perLoadWords(within))
	} else {
		msg += fmt.Sprintf(": every row of the table is above SGLang's cap of %d; give a table from a lower concurrency, or fewer steps", sglangSpecCap)
	}
	return &capError{msg: msg, err: err}
}

// capError is a per-load change's error with what to apply instead; it
// unwraps to the change's error.
type capError struct {
	msg string
	err error
}

func (e *capError) Error() string { return e.msg }
func (e *capError) Unwrap() error { return e.err }

// checkRows checks a per-load table: concurrencies ascending from 1 up,
// steps and candidates within 0..32, the first row's steps at least 1 (the
// steps the engine starts with).
func checkRows(rows []PerLoadRow) error {
	if len(rows) == 0 {
		return errors.New("the table is empty")
	}
	for i, row := range rows {
		if row.Concurrency < 1 || (i > 0 && row.Concurrency <= rows[i-1].Concurrency) {
			return fmt.Errorf("concurrencies must rise from 1 or more, each once: %s", perLoadWords(rows))
		}
		for _, n := range append([]int{row.Steps}, row.Candidates...) {
			if n < 0 || n > 32 {
				return fmt.Errorf("steps %d at concurrency %d: use 0..32", n, row.Concurrency)
			}
		}
	}
	if rows[0].Steps < 1 {
		return fmt.Errorf("the first concurrency's steps are the steps the engine starts with: at least 1")
	}
	return nil
}

// besideNames lists the paths of files beside the unit.
func besideNames(fs []FileChange) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Path
	}
	return strings.Join(names, ", ")
}
