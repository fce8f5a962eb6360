package ops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"

	"github.com/opsbot/opsbot/ops/unit"
)

// PerLoadOptions are `mtp tune SERVICE per-load [RANGE] at LIST
// [compare]`: the concurrencies to tune for, the steps searched, and whether
// to measure what would run otherwise beside the proposal.
type PerLoadOptions struct {
	At       []int // concurrencies, at least two, each once
	From, To int   // the steps values searched, 0 <= From < To
	// Compare measures, at the same concurrencies, SGLang's default adaptive
	// table beside the proposal (vLLM: nothing more: no speculation and the
	// best single k are measured anyway).
	Compare bool
	DryRun  bool
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

// PerLoadStarts is the most starts a per-load tune spends on its proposal:
// it tries at most three configurations (perLoadTries), and one that does
// not start costs its own start and its rollback's.
const PerLoadStarts = 5

// PerLoadRow is one concurrency of a per-load proposal.
type PerLoadRow struct {
	Concurrency int `json:"concurrency"`
	// Steps is the fastest steps value measured at this concurrency (0: no
	// speculative decoding; 0 also at the top loads where no speculation
	// measured within perLoadGoal of the fastest: preferNone); Candidates the
	// values within PerLoadNoise of it (Steps first; only 0 where it is 0),
	// which the engine may move between (SGLang's candidate_steps).
	Steps      int   `json:"steps"`
	Candidates []int `json:"candidates"`
	// Slot, when not 0, is the slot of the table that serves this
	// concurrency, whose Steps and Candidates the row then holds: its own
	// slot was dropped (with SGLang's cap of 48 running requests left alone,
	// no batch reaches a slot above 48).
	Slot int `json:"slot,omitempty"`
	// OutputTokS is the per-load configuration's output tok/s here, measured
	// when the tune started it (null: not measured here, MeasureError says
	// why); AcceptLen and AcceptRate are that run's (absent: not measured).
	OutputTokS   *float64 `json:"output_tok_s"`
	MeasureError string   `json:"measure_error,omitempty"`
	AcceptLen    float64  `json:"accept_len,omitempty"`
	AcceptRate   float64  `json:"accept_rate,omitempty"`
	// StepsTokS is Steps run alone (one setting at every load) here, as the
	// search measured it.
	StepsTokS float64 `json:"steps_tok_s"`
	// SingleTokS is the best single setting's tok/s here and GainPct the
	// configuration's gain over it; NoSpecTokS is no speculative decoding
	// here (steps 0) and NoSpecGainPct the gain over it. Null: not measured.
	SingleTokS    *float64 `json:"single_tok_s"`
	GainPct       *float64 `json:"gain_pct"`
	NoSpecTokS    *float64 `json:"no_spec_tok_s"`
	NoSpecGainPct *float64 `json:"no_spec_gain_pct"`
	// Prompts is how many prompts each of the tune's benchmarks at this
	// concurrency sent (its measuring window: perLoadPrompts).
	Prompts int `json:"prompts,omitempty"`
	// fastest and fastestTokS are the fastest value measured here and its
	// figure when the row runs no speculation instead (preferNone).
	fastest     int
	fastestTokS float64
	// Queued is how many of the concurrent requests waited for a slot when
	// the configuration was measured (SGLang runs at most 48 with speculation
	// unless --max-running-requests is set).
	Queued int `json:"queued,omitempty"`
}

// PerLoad is a per-load proposal: the configuration the tune started and
// measured, the engine's own form of it, and what was dropped on the way.
type PerLoad struct {
	Engine string       `json:"engine"`
	Rows   []PerLoadRow `json:"rows"`
	// Single is the best single steps value over all the concurrencies (the
	// highest mean tok/s relative to each concurrency's best; 0 is no
	// speculation).
	Single int `json:"single"`
	// Steps is the unit's --speculative-num-steps (SGLang: the table's
	// smallest candidate above 0, one of the candidates as SGLang requires,
	// whose CUDA graphs take the least memory; see startSteps) or
	// num_speculative_tokens (vLLM: the table's largest k).
	Steps int `json:"steps"`
	// File and FileText are SGLang's adaptive config: its path on the host
	// and its JSON; Table is vLLM's num_speculative_tokens_per_batch_size.
	File     string      `json:"file,omitempty"`
	FileText string      `json:"file_text,omitempty"`
	Table    string      `json:"table,omitempty"`
	Unit     *UnitChange `json:"unit,omitempty"`
	// SkipZeroDraftExtend is SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND
	// in the unit (an Environment= line): proposed only when a slot holds
	// only 0 and the tune measured the table with it faster than without it
	// (the other one is in Compared).
	SkipZeroDraftExtend bool `json:"skip_zero_draft_extend,omitempty"`
	// Mixed is true when the proposal is compare's mix (mixIfBehind): the
	// search's table measured more than 3% below a compared configuration
	// at some load, and the mix of the per-load best measured there, started
	// and measured, did better. Mix says in a line what compare did then
	// ("" when the proposal missed nowhere).
	Mixed bool   `json:"mixed,omitempty"`
	Mix   string `json:"mix,omitempty"`
	// Missed are the loads where the proposal, as measured, is more than 3%
	// below no speculation, the best single setting or SGLang's default
	// table (those compared), the worst at each load; empty when none.
	Missed []PerLoadMiss `json:"missed,omitempty"`
	// Dropped are the configurations the tune started first that did not
	// serve, in order, each with why.
	Dropped []PerLoadDropped `json:"dropped,omitempty"`
	// Compared are the configurations measured beside the proposal at the
	// same concurrencies: no speculation, the best single setting, and with
	// compare SGLang's default adaptive table.
	Compared []PerLoadCompared `json:"compared,omitempty"`
	// Between are the concurrencies the tune measured between those asked
	// (betweenLoads), each a row and a slot of its own like those asked.
	Between []int `json:"between,omitempty"`
	// GridRestarts is what a full sweep of the values this tune may measure
	// (no speculation and every value of the range) restarts: one each.
	GridRestarts int `json:"grid_restarts"`
	// Apply is the command that deploys the proposal.
	Apply string `json:"apply"`
}

// PerLoadDropped is a configuration the tune started that did not serve.
type PerLoadDropped struct {
	Table  string `json:"table"`  // its mtp per-load TABLE
	Change string `json:"change"` // what it had that the next try has not
	Reason string `json:"reason"` // why it did not serve
}

// PerLoadCompared is one configuration measured beside the proposal.
type PerLoadCompared struct {
	// Name is "no_speculation", "best_single", "sglang_default", or the
	// proposal's table measured with the other SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND:
	// "with_skip_zero_extend" or "without_skip_zero_extend".
	Name string `json:"name"`
	// Setting says it in words ("steps 4", "SGLang's default adaptive table").
	Setting string         `json:"setting"`
	Points  []PerLoadPoint `json:"points"`
}

// PerLoadPoint is one concurrency's figure of a compared configuration.
type PerLoadPoint struct {
	Concurrency int      `json:"concurrency"`
	OutputTokS  *float64 `json:"output_tok_s"` // null: not measured (Error says why)
	Error       string   `json:"error,omitempty"`
}

// TunePerLoad is `mtp tune SERVICE per-load at LIST [RANGE] [compare]`: it
// finds the fastest steps value at each concurrency of o.At with few
// restarts, starts the engine's own per-load form of them and benchmarks it
// at every concurrency, and proposes it with those figures. It changes
// nothing it does not put back.
//
// Measuring: no speculative decoding (steps 0) first, whatever the range,
// then a golden-section search (as Tune) at the lowest concurrency over
// o.From..o.To, then at each higher concurrency a climb to the nearest peak
// from the best value already measured within o.From up to the value the
// concurrency before found (throughput over steps has one peak at each load,
// and it moves down as the load grows: verify work grows with draft tokens x
// batch). Each value is deployed once through the mtp steps pipeline and
// benchmarked at every concurrency on that start; the golden-section search
// stops once no value left may beat the best measured by more than
// PerLoadNoise (perLoadSearch.worth: concave bounds from the values measured
// around it).
//
// Proposing: each row is the best value measured at its concurrency (0
// included) with the values within PerLoadNoise as candidates; SGLang's
// adaptive config (a slot per concurrency, no "strategy" key: SGLang's ema,
// which runs step 0) at the service's adaptive_config path and the unit flags
// that enable it, or vLLM's per-batch table inside --speculative-config. That
// configuration is started through the same pipeline and benchmarked at every
// concurrency; when it does not serve it is rolled back and dropped for the
// next of perLoadTries (the cap left alone, then one value a slot), which is
// measured in turn. Only a configuration that served is proposed, its rows
// carrying what was measured with it, beside the best single setting and no
// speculation; o.Compare adds SGLang's default adaptive table, measured at
// the same concurrencies. Result.Restarts counts every start.
//
// Afterwards the service is put back on the steps it ran (its default_steps
// when set) and the adaptive file as it found it. A cancel stops it where it
// is (Result.Left says where).
func (r *Runbook) TunePerLoad(ctx context.Context, service string, o PerLoadOptions, rep Reporter) (*Result, error) {
	res := &Result{Incidents: []string{}, Metric: MetricOutputTokS}
	t, err := r.target(service)
	if err != nil {
		return nil, err
	}
	at, err := perLoadAt(service, o)
	if err != nil {
		return res, err
	}
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, err
	}
	f := foundUnit(d)
	engine, home, err := r.perLoadCheck(ctx, t, f, service, o)
	if err != nil {
		return res, err
	}
	grid := o.To - o.From + 1
	if o.From > 0 {
		grid++ // no speculation
	}
	between := betweenLoads(at)
	if o.DryRun {
		res.Summary = perLoadDryRun(service, engine, at, between, o, grid, home)
		return res, nil
	}
	loads := slices.Sorted(slices.Values(append(slices.Clone(at), between...)))
	s := &perLoadSearch{r: r, t: t, service: service, at: loads, res: res, rep: rep, memo: map[int][]float64{}, from: f}
	pl, err := s.propose(ctx, engine, d, o)
	if err != nil {
		return res, r.perLoadLeave(ctx, service, home, res, rep, err)
	}
	pl.GridRestarts, pl.Between = grid, between
	if err := r.perLoadLeave(ctx, service, home, res, rep, nil); err != nil {
		return res, err
	}
	if err := r.perLoadPropose(ctx, t, engine, pl); err != nil {
		return res, err
	}
	pl.Apply = fmt.Sprintf("mtp per-load %s %s", service, perLoadCommand(pl.Rows, pl.SkipZeroDraftExtend))
	res.PerLoad = pl
	for i := range pl.Rows {
		pl.Rows[i].Prompts = r.perLoadPrompts(pl.Rows[i].Concurrency)
	}
	res.Details = append(append(append(pl.Decision(), r.perLoadWindow(loads)), res.Details...), pl.Report()...)
	left := fmt.Sprintf("%s left on %s", service, home)
	if sp, err := d.eff.Spec(); err == nil && sp.DraftSteps() == home.Steps {
		left += ", as found"
	} else {
		left += " (its default_steps)"
	}
	missed := ""
	if len(pl.Missed) > 0 {
		missed = fmt.Sprintf("; more than %.0f%% below what would run otherwise at %s", 100*perLoadGoal, missText(pl.Missed))
	}
	res.Summary = fmt.Sprintf("mtp tune %s per load at %s%s: `%s`, started and measured: %s%s; %d restarts for %d values (a full sweep of them: %d, and back); not applied; %s",
		service, intList(at), betweenText(between), pl.Apply, pl.Brief(), missed, res.Restarts, len(res.Tried), grid, left)
	return res, nil
}

// perLoadDryRun says what a per-load tune would measure.
func perLoadDryRun(service, engine string, at, between []int, o PerLoadOptions, grid int, home Setting) string {
	what := fmt.Sprintf("dry run: would measure no speculative decoding and search steps %d..%d on %s at concurrency %s%s (each value one restart, "+
		"benchmarked at every concurrency; a full sweep of them needs %d), then start the per-load configuration of the best values and "+
		"benchmark it at every concurrency (one restart; up to %d more when it does not start and a fallback is tried; "+
		"a table with a slot holding only 0 is started with %s=1, and once more without it where a slot of 0 serves a load it measures more than 3%% below no speculation at), "+
		"values measured only where they may beat the best measured by more than 2%%; each benchmark at concurrency N sends max(bench.prompts, %d x N) prompts",
		o.From, o.To, service, intList(at), betweenText(between), grid, PerLoadStarts-1, unit.EnvSkipZeroDraftExtend, perLoadWaves)
	if o.Compare && engine != "vllm" {
		what += ", measure SGLang's default adaptive table at the same concurrencies (one restart), and where the proposal measures more than 3% below it, " +
			"no speculation or the best single setting at some load, start and measure the mix of the per-load best measured there (one restart more)"
	}
	return what + fmt.Sprintf(", and leave %s on %s with its adaptive file as found; nothing is changed now", service, home)
}

// perLoadAt checks o's concurrencies and range (nothing is read or changed)
// and returns the concurrencies ascending.
func perLoadAt(service string, o PerLoadOptions) ([]int, error) {
	at := slices.Clone(o.At)
	slices.Sort(at)
	if len(slices.Compact(at)) != len(o.At) || len(at) < 2 || at[0] < 1 {
		return nil, fmt.Errorf("tune %s per load: give two concurrencies or more, each once (e.g. at 1,8,32,64), got %s", service, intList(o.At))
	}
	if o.From < 0 || o.To <= o.From {
		return nil, fmt.Errorf("tune %s per load: the range %d..%d must go up and hold two values at least (0: speculative decoding off)", service, o.From, o.To)
	}
	return at, nil
}

// perLoadCheck refuses a per-load tune of the unit d before anything
// changes: each end of o's range must plan, and so must the form the
// proposal will take (SGLang: EAGLE with topk 1, and a path to write its
// adaptive config). It returns the unit's engine and home, the setting the
// service is left on afterwards: its default_steps when set, else the steps
// it runs now, with the adaptive file as it is now (put back, or removed
// when there is none).
func (r *Runbook) perLoadCheck(ctx context.Context, t *target, f *found, service string, o PerLoadOptions) (engine string, home Setting, err error) {
	d := f.d
	sp, err := d.eff.Spec()
	if err != nil {
		return "", Setting{}, err
	}
	engine = unitEngine(d)
	for _, n := range []int{o.From, o.To} {
		if _, err := r.plan(t, d, Setting{Steps: n}); err != nil {
			return "", Setting{}, fmt.Errorf("steps %d: %w", n, err)
		}
	}
	if engine != "vllm" && t.cfg.AdaptiveConfig == "" {
		return "", Setting{}, fmt.Errorf("tune %s per load: services.%s.adaptive_config is not set: no path for SGLang's adaptive config", service, service)
	}
	first := max(o.From, 1)
	if _, err := r.perLoadPlan(t, d, engine, []PerLoadRow{{Concurrency: 1, Steps: first, Candidates: []int{first}}}, false); err != nil {
		return "", Setting{}, err
	}
	home = Setting{Steps: sp.DraftSteps(), from: f}
	if t.cfg.DefaultSteps > 0 {
		home.Steps = t.cfg.DefaultSteps
	}
	if engine != "vllm" {
		file := FileChange{Path: t.cfg.AdaptiveConfig}
		b, err := t.host.ReadFile(ctx, file.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			file.Removed = true
		case err != nil:
			return "", Setting{}, hostErr("read "+file.Path, t.cfg.Host, err)
		default:
			file.After = string(b)
		}
		home.restore = &fileSet{[]FileChange{file}}
	}
	return engine, home, nil
}

// perLoadPropose fills in pl's engine form from its rows: the unit's steps,
// SGLang's adaptive config or vLLM's per-batch table, and the unit change
// with the files beside it (their diffs against what the host has now). It
// plans against the unit as it is now, so it runs once the service is back
// on home.
func (r *Runbook) perLoadPropose(ctx context.Context, t *target, engine string, pl *PerLoad) error {
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return err
	}
	prop, err := r.perLoadPlan(t, d, engine, pl.Rows, pl.SkipZeroDraftExtend)
	if err != nil {
		return fmt.Errorf("measured, but the proposal cannot be written: %w", err)
	}
	if err := readBeside(ctx, t, prop.planned); err != nil {
		return fmt.Errorf("measured, but: %w", err)
	}
	pl.Steps, pl.File, pl.FileText, pl.Table, pl.Unit = prop.steps, prop.file, prop.fileText, prop.table, prop.unit
	pl.Unit.Files = prop.planned.files
	return nil
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

// unitEngine is the engine the unit launches: "sglang" or "vllm".
func unitEngine(d *deployed) string {
	if d.eff.Detection.Engine == unit.VLLM {
		return "vllm"
	}
	return "sglang"
}

// betweenLoads are the concurrencies a per-load tune measures between two
// asked (at, ascending) more than twice apart: SGLang's slot keys are lower
// bounds applied after padding the batch up to a CUDA-graph size
// (adaptive_step_router.py, batch_size_key_for_batch), so every load from
// one slot's key up to the next's runs the lower slot's steps; with slots
// only at the loads asked, a load far above a slot's key (16 between 8 and
// 32) would run steps measured for a much smaller batch. Each is the
// geometric mean of the two, rounded to a CUDA-graph batch size SGLang
// captures by default (a power of two up to 8, then a multiple of 8): 4
// between 1 and 8, 16 between 8 and 32, 48 between 32 and 64. Each start
// benchmarks them too: they cost benchmarks, not restarts.
func betweenLoads(at []int) []int {
	var out []int
	for i := 1; i < len(at); i++ {
		a, b := at[i-1], at[i]
		if b < 2*a {
			continue
		}
		g := math.Sqrt(float64(a) * float64(b))
		m := int(math.Pow(2, math.Round(math.Log2(g))))
		if g > 8 {
			m = 8 * int(math.Round(g/8))
		}
		if m > a && m < b {
			out = append(out, m)
		}
	}
	return out
}

// betweenText says the loads measured between those asked ("" when none).
func betweenText(between []int) string {
	if len(between) == 0 {
		return ""
	}
	return " (and " + intList(between) + " between them)"
}
