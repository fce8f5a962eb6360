package ops

import (
	"context"
	"fmt"
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
	at, err := perLoadAt(service, o)
	if err != nil {
		return res, err
	}
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return res, err
	}
	engine, home, err := r.perLoadCheck(t, d, service, o)
	if err != nil {
		return res, err
	}
	grid := o.To - o.From + 1
	if o.DryRun {
		res.Summary = fmt.Sprintf("dry run: would search steps %d..%d on %s at concurrency %s (each value tried is one restart, "+
			"benchmarked at every concurrency; the full grid needs %d), propose a per-load configuration and leave %s on %s",
			o.From, o.To, service, intList(at), grid, service, home)
		return res, nil
	}
	s := &perLoadSearch{r: r, t: t, service: service, at: at, res: res, rep: rep, memo: map[int][]float64{}}
	if err := s.run(ctx, o.From, o.To); err != nil {
		return res, r.perLoadLeave(ctx, service, home, res, rep, err)
	}
	pl := perLoadRows(at, s.memo, res.Points)
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
	if err := r.perLoadPropose(ctx, t, engine, pl); err != nil {
		return res, err
	}
	pl.Apply = fmt.Sprintf("mtp per-load %s %s", service, perLoadWords(pl.Rows))
	res.PerLoad = pl
	res.Details = append(res.Details, pl.Report()...)
	res.Summary = fmt.Sprintf("mtp tune %s per load at %s: %s; %d restarts for %d values (the full grid: %d); proposed, not applied: `%s` applies it",
		service, intList(at), pl.Brief(), res.Restarts, len(res.Tried), grid, pl.Apply)
	return res, nil
}

// perLoadAt checks o's concurrencies and range (nothing is read or changed)
// and returns the concurrencies ascending.
func perLoadAt(service string, o PerLoadOptions) ([]int, error) {
	at := slices.Clone(o.At)
	slices.Sort(at)
	if len(slices.Compact(at)) != len(o.At) || len(at) < 2 || at[0] < 1 {
		return nil, fmt.Errorf("tune %s per load: give two concurrencies or more, each once (e.g. at 1,8,32,64), got %s", service, intList(o.At))
	}
	if o.From < 1 || o.To <= o.From {
		return nil, fmt.Errorf("tune %s per load: the range %d..%d must go up and hold two values at least", service, o.From, o.To)
	}
	return at, nil
}

// perLoadCheck refuses a per-load tune of the unit d before anything
// changes: each end of o's range must plan, and so must the form the
// proposal will take (SGLang: EAGLE with topk 1, and a path to write its
// adaptive config). It returns the unit's engine and home, the setting the
// service is left on afterwards: its default_steps when set, else the steps
// it runs now.
func (r *Runbook) perLoadCheck(t *target, d *deployed, service string, o PerLoadOptions) (engine string, home Setting, err error) {
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
	if _, err := r.perLoadPlan(t, d, engine, []PerLoadRow{{Concurrency: 1, Steps: o.From, Candidates: []int{o.From}}}); err != nil {
		return "", Setting{}, err
	}
	home = Setting{Steps: sp.DraftSteps()}
	if t.cfg.DefaultSteps > 0 {
		home.Steps = t.cfg.DefaultSteps
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
	prop, err := r.perLoadPlan(t, d, engine, pl.Rows)
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
