package ops

import (
	"encoding/json"

	"github.com/opsbot/opsbot/ops/bench"
)

// FigureAcceptRate names a point's acceptance rate beside the sweep metrics
// (Measured, MetricOf); it is never a sweep's metric.
const FigureAcceptRate = "accept_rate"

// Measured reports whether p's figure named metric (a Metric* name or
// FigureAcceptRate) was measured: p served, and its benchmark gave the
// figure (an accept length is at least 1; a rate needs the accept length and
// the drafts per step). A figure not measured is shown as unknown ("—" in
// text, null in JSON, a gap in a chart), never as 0.
func (p SweepPoint) Measured(metric string) bool {
	if !p.OK {
		return false
	}
	switch metric {
	case MetricAcceptLen:
		return bench.KnownAcceptLen(p.AcceptLen)
	case FigureAcceptRate:
		return bench.KnownAcceptLen(p.AcceptLen) && bench.Known(p.AcceptRate)
	case MetricPerStreamTokS:
		return bench.Known(p.PerStreamTokS) && p.PerStreamTokS > 0
	}
	return bench.Known(p.OutputTokS) && p.OutputTokS > 0
}

// known is f when p measured the figure named metric, else nil (null).
func (p SweepPoint) known(metric string, f float64) *float64 {
	if !p.Measured(metric) {
		return nil
	}
	return &f
}

// sweepPointJSON is SweepPoint without its JSON methods.
type sweepPointJSON SweepPoint

// MarshalJSON writes p with null for the figures it did not measure (the
// outer fields stand in for SweepPoint's own of the same JSON names).
func (p SweepPoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		sweepPointJSON
		OutputTokS    *float64 `json:"output_tok_s"`
		PerStreamTokS *float64 `json:"per_stream_tok_s"`
		AcceptLen     *float64 `json:"accept_len"`
		AcceptRate    *float64 `json:"accept_rate"`
	}{sweepPointJSON(p), p.known(MetricOutputTokS, p.OutputTokS), p.known(MetricPerStreamTokS, p.PerStreamTokS),
		p.known(MetricAcceptLen, p.AcceptLen), p.known(FigureAcceptRate, p.AcceptRate)})
}

// UnmarshalJSON reads p, null or absent figures as unknown.
func (p *SweepPoint) UnmarshalJSON(b []byte) error {
	v := struct {
		*sweepPointJSON
		OutputTokS    *float64 `json:"output_tok_s"`
		PerStreamTokS *float64 `json:"per_stream_tok_s"`
		AcceptLen     *float64 `json:"accept_len"`
		AcceptRate    *float64 `json:"accept_rate"`
	}{sweepPointJSON: (*sweepPointJSON)(p)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	p.OutputTokS, p.PerStreamTokS = bench.FromFigure(v.OutputTokS), bench.FromFigure(v.PerStreamTokS)
	p.AcceptLen, p.AcceptRate = bench.FromFigure(v.AcceptLen), bench.FromFigure(v.AcceptRate)
	return nil
}

// perLoadRowJSON is PerLoadRow without its JSON methods.
type perLoadRowJSON PerLoadRow

// MarshalJSON writes row with null for the figures it did not measure
// (its other figures are pointers already: nil is null).
func (row PerLoadRow) MarshalJSON() ([]byte, error) {
	al, rate := row.AcceptLen, row.AcceptRate
	if !bench.KnownAcceptLen(al) {
		al, rate = bench.Unknown(), bench.Unknown()
	}
	return json.Marshal(struct {
		perLoadRowJSON
		AcceptLen  *float64 `json:"accept_len"`
		AcceptRate *float64 `json:"accept_rate"`
		StepsTokS  *float64 `json:"steps_tok_s"`
	}{perLoadRowJSON(row), bench.Figure(al), bench.Figure(rate), bench.Figure(row.StepsTokS)})
}

// UnmarshalJSON reads row, null or absent figures as unknown.
func (row *PerLoadRow) UnmarshalJSON(b []byte) error {
	v := struct {
		*perLoadRowJSON
		AcceptLen  *float64 `json:"accept_len"`
		AcceptRate *float64 `json:"accept_rate"`
		StepsTokS  *float64 `json:"steps_tok_s"`
	}{perLoadRowJSON: (*perLoadRowJSON)(row)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	row.AcceptLen, row.AcceptRate, row.StepsTokS = bench.FromFigure(v.AcceptLen), bench.FromFigure(v.AcceptRate), bench.FromFigure(v.StepsTokS)
	return nil
}

// PointOf is one benchmark b of a service running spec as a point, for the
// tables and notes that read points: a per-load spec (SGLang's adaptive
// mode, vLLM's per-batch table) makes it a per-load point, whose steps are
// those the engine reported choosing (b.EngineSteps).
func PointOf(b *BenchResult, spec *Spec) SweepPoint {
	p := SweepPoint{OK: b.Measured(), Bench: b, Spec: spec, Concurrency: b.Concurrency,
		OutputTokS: b.OutputTokS, PerStreamTokS: b.PerStreamTokS, AcceptLen: b.AcceptLen, AcceptRate: b.AcceptRate}
	if p.Concurrency == 0 {
		p.Concurrency = b.Settings.Concurrency
	}
	if spec != nil {
		p.Steps, p.TopK, p.DraftTokens = spec.Steps, spec.TopK, spec.DraftTokens
		if spec.Adaptive != "" || spec.BatchTable != "" {
			p.PerLoad = &PointPerLoad{Chosen: b.EngineSteps}
		}
	}
	return p
}

// The benchmark's unknown figures, for those that read results without
// running benchmarks (report): a figure not measured is Unknown (NaN; null
// in JSON) and shown as Dash; why acceptance is unknown is one of the
// Cause* of ops/bench.
const (
	Dash               = bench.Dash
	CauseShortRun      = bench.CauseShortRun
	CauseDraftsUnknown = bench.CauseDraftsUnknown
)

// Known reports whether f was measured (bench.Known).
func Known(f float64) bool { return bench.Known(f) }

// KnownAcceptLen reports whether l is a measured accept length
// (bench.KnownAcceptLen).
func KnownAcceptLen(l float64) bool { return bench.KnownAcceptLen(l) }

// Unknown is the value of a figure that was not measured (bench.Unknown).
func Unknown() float64 { return bench.Unknown() }
