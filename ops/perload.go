package ops

import (
	"context"
	"fmt"
	"math"
	"slices"

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
		if err := windDown(ctx); err != nil {
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

// unitEngine is the engine the unit launches: "sglang" or "vllm".
func unitEngine(d *deployed) string {
	if d.eff.Detection.Engine == unit.VLLM {
		return "vllm"
	}
	return "sglang"
}
