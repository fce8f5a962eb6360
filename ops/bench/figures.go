package bench

import (
	"encoding/json"
	"math"
)

// A figure that was not measured is unknown: NaN in Go and null in JSON,
// never 0, so that no reader mistakes "not measured" for a measurement.
// Result's figures are unknown when nothing measured them: throughput and
// latencies when no request succeeded, per-stream decode when no request
// produced two tokens, acceptance when the engine gave no figure over the
// window (AcceptCause says why).

// Unknown is the value of a figure that was not measured.
func Unknown() float64 { return math.NaN() }

// Known reports whether f was measured: it is not Unknown (nor infinite,
// which no measurement gives).
func Known(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// KnownAcceptLen reports whether l is a measured accept length: at least 1
// (one token per verify step). 0, which results stored before unknown
// figures were null use for "not measured", is unknown too.
func KnownAcceptLen(l float64) bool { return l >= 1 }

// Causes of an unknown acceptance figure (Result.AcceptCause).
const (
	// CauseShortRun: the run ended before the engine logged one decode
	// window, so it reported nothing over the window. Longer outputs (or
	// more prompts) measure it.
	CauseShortRun = "short_run"
	// CauseDraftsUnknown: the accept length is known but not the drafts per
	// step it divides by (the engine chose its steps per batch), so the rate
	// is unknown.
	CauseDraftsUnknown = "drafts_unknown"
	// CauseNotMeasured: the engine gave no acceptance over the window for
	// another reason (Result.Errors has it).
	CauseNotMeasured = "not_measured"
)

// Figure is f as JSON: nil (null) when unknown.
func Figure(f float64) *float64 {
	if !Known(f) {
		return nil
	}
	return &f
}

// FromFigure is a JSON figure as a float: Unknown for null or absent.
func FromFigure(p *float64) float64 {
	if p == nil {
		return Unknown()
	}
	return *p
}

// MarshalJSON writes s with null for unknown figures.
func (s Stat) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Mean *float64 `json:"mean"`
		P50  *float64 `json:"p50"`
		P99  *float64 `json:"p99"`
	}{Figure(s.Mean), Figure(s.P50), Figure(s.P99)})
}

// UnmarshalJSON reads s, null as unknown.
func (s *Stat) UnmarshalJSON(b []byte) error {
	var v struct {
		Mean *float64 `json:"mean"`
		P50  *float64 `json:"p50"`
		P99  *float64 `json:"p99"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Stat{Mean: FromFigure(v.Mean), P50: FromFigure(v.P50), P99: FromFigure(v.P99)}
	return nil
}

// unknownStat is a latency with no sample.
func unknownStat() Stat { return Stat{Mean: Unknown(), P50: Unknown(), P99: Unknown()} }

// resultJSON is Result without its JSON methods.
type resultJSON Result

// MarshalJSON writes r with null for its unknown figures (the outer fields
// stand in for Result's own of the same JSON names: the shallower wins).
func (r Result) MarshalJSON() ([]byte, error) {
	al := r.AcceptLen
	if !KnownAcceptLen(al) {
		al = Unknown()
	}
	return json.Marshal(struct {
		resultJSON
		OutputTokS       *float64 `json:"output_tok_s"`
		PerStreamTokS    *float64 `json:"per_stream_tok_s"`
		AcceptLen        *float64 `json:"accept_len"`
		AcceptRate       *float64 `json:"accept_rate"`
		EngineAcceptRate *float64 `json:"engine_accept_rate"`
	}{resultJSON(r), Figure(r.OutputTokS), Figure(r.PerStreamTokS), Figure(al), Figure(r.AcceptRate), Figure(r.EngineAcceptRate)})
}

// UnmarshalJSON reads r, null (or absent) figures as unknown.
func (r *Result) UnmarshalJSON(b []byte) error {
	v := struct {
		*resultJSON
		OutputTokS       *float64 `json:"output_tok_s"`
		PerStreamTokS    *float64 `json:"per_stream_tok_s"`
		AcceptLen        *float64 `json:"accept_len"`
		AcceptRate       *float64 `json:"accept_rate"`
		EngineAcceptRate *float64 `json:"engine_accept_rate"`
	}{resultJSON: (*resultJSON)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.OutputTokS, r.PerStreamTokS = FromFigure(v.OutputTokS), FromFigure(v.PerStreamTokS)
	r.AcceptLen, r.AcceptRate, r.EngineAcceptRate = FromFigure(v.AcceptLen), FromFigure(v.AcceptRate), FromFigure(v.EngineAcceptRate)
	return nil
}
