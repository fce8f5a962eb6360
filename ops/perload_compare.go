package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	}
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
