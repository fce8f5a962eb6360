package ops

import "context"

// StartProposal runs a per-load tune's proposal step alone on the lab: it
// starts rows (measured at the concurrencies at) as the tune would after its
// search, falling back as the tune does when they do not serve. For tests
// of that step with rows the lab's physics would not pick.
func (r *Runbook) StartProposal(ctx context.Context, service string, rows []PerLoadRow, at []int, rep Reporter) (*Result, *PerLoad, error) {
	s, d, err := r.testSearch(ctx, service, at, rep)
	res := s.res
	if err != nil {
		return res, nil, err
	}
	pl := &PerLoad{Engine: unitEngine(d), Rows: rows}
	return res, pl, s.startProposal(ctx, pl, d)
}

// DeployDefaultTable deploys SGLang's default adaptive table (the unit's
// flags with --speculative-adaptive and no config file) starting at steps,
// as `mtp tune ... per-load ... compare` does, without benchmarking it.
func (r *Runbook) DeployDefaultTable(ctx context.Context, service string, steps int, rep Reporter) (*Result, error) {
	return r.mtpSet(ctx, service, Setting{Steps: steps, adaptiveDefault: true}, false, false, rep)
}

// Judge is judge for tests.
var Judge = judge

// MixIfBehind runs compare's guard alone on the lab: pl (its rows measured,
// its comparisons) at the concurrencies at, as the tune would after
// measuring SGLang's default table. For tests with figures the lab's physics
// would not give.
func (r *Runbook) MixIfBehind(ctx context.Context, service string, pl *PerLoad, at []int, rep Reporter) (*Result, error) {
	s, d, err := r.testSearch(ctx, service, at, rep)
	res := s.res
	if err != nil {
		return res, err
	}
	return res, s.mixIfBehind(ctx, pl, d)
}

// PerLoadGrid measures every steps value of from..to at the concurrencies
// at the way a per-load tune measures one (started once, benchmarked at
// every concurrency with the tune's measuring window), then puts the
// service back on steps back: the full sweep a tune is set against, with
// the same window. For the benchmark's figures.
func (r *Runbook) PerLoadGrid(ctx context.Context, service string, at []int, from, to, back int) (*Result, error) {
	s, _, err := r.testSearch(ctx, service, at, Discard)
	res := s.res
	if err != nil {
		return res, err
	}
	for n := from; n <= to; n++ {
		if _, err := s.measure(ctx, n); err != nil {
			return res, err
		}
	}
	_, err = r.settle(ctx, service, Setting{Steps: back, from: s.from}, "back: ", res, Discard)
	return res, err
}

// ShortenPerLoadWindow makes a per-load tune's measuring window n waves
// until the test ends. Only for tests that run alone (not t.Parallel):
// the window is the package's.
func ShortenPerLoadWindow(t interface{ Cleanup(func()) }, n int) {
	old := perLoadWaves
	perLoadWaves = n
	t.Cleanup(func() { perLoadWaves = old })
}

// testSearch is a per-load search of service at the concurrencies at, as
// the tune starts one, and the unit it read; its res is set even when
// reading failed.
func (r *Runbook) testSearch(ctx context.Context, service string, at []int, rep Reporter) (*perLoadSearch, *deployed, error) {
	s := &perLoadSearch{r: r, service: service, at: at, res: &Result{Incidents: []string{}}, rep: rep, memo: map[int][]float64{}}
	t, err := r.target(service)
	if err != nil {
		return s, nil, err
	}
	d, err := r.readUnit(ctx, t)
	if err != nil {
		return s, nil, err
	}
	s.t, s.from = t, foundUnit(d)
	return s, d, nil
}
