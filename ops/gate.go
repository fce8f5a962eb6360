package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/opsbot/opsbot/ops/bench"
)

// gateRounds is how many benchmark rounds each side of the gate runs,
// interleaved: canary, sibling, canary, sibling.
const gateRounds = 2

// GateResult is the canary's comparison with its unchanged sibling, both
// benchmarked in the same window (interleaved rounds, straight to each
// replica's URL, the same load), and the gate's verdict. A figure not
// measured is null in JSON and fails the gate (Failed says why).
type GateResult struct {
	Canary  string `json:"canary"`
	Sibling string `json:"sibling"`
	Rounds  int    `json:"rounds"` // per side
	// Load is each round's benchmark: prompts at concurrency, tokens in and out.
	Load BenchParams `json:"load"`
	// The figures: output tok/s over the rounds (their tokens over their
	// time) and TTFT p95 over every request of the rounds, in ms.
	CanaryTokS      float64 `json:"canary_tok_s"`
	SiblingTokS     float64 `json:"sibling_tok_s"`
	CanaryTTFTP95   float64 `json:"canary_ttft_p95_ms"`
	SiblingTTFTP95  float64 `json:"sibling_ttft_p95_ms"`
	TokSRatio       float64 `json:"tok_s_ratio"`
	TTFTP95Ratio    float64 `json:"ttft_p95_ratio"`
	MinTokSRatio    float64 `json:"min_tok_s_ratio"`
	MaxTTFTP95Ratio float64 `json:"max_ttft_p95_ratio"`
	// FailedRequests counts the rounds' requests that failed, both sides.
	FailedRequests int  `json:"failed_requests"`
	Pass           bool `json:"pass"`
	// Failed says each gate that failed and by how much ("tok/s 0.91x the
	// sibling's, gate 0.97x"), or why a figure is unknown.
	Failed []string `json:"failed,omitempty"`
}

// MarshalJSON writes the figures not measured (NaN) as null.
func (g GateResult) MarshalJSON() ([]byte, error) {
	type plain GateResult
	num := bench.Figure
	return json.Marshal(struct {
		plain
		CanaryTokS     *float64 `json:"canary_tok_s"`
		SiblingTokS    *float64 `json:"sibling_tok_s"`
		CanaryTTFTP95  *float64 `json:"canary_ttft_p95_ms"`
		SiblingTTFTP95 *float64 `json:"sibling_ttft_p95_ms"`
		TokSRatio      *float64 `json:"tok_s_ratio"`
		TTFTP95Ratio   *float64 `json:"ttft_p95_ratio"`
	}{plain(g), num(g.CanaryTokS), num(g.SiblingTokS), num(g.CanaryTTFTP95), num(g.SiblingTTFTP95), num(g.TokSRatio), num(g.TTFTP95Ratio)})
}

// UnmarshalJSON reads null figures back as unknown (NaN).
func (g *GateResult) UnmarshalJSON(b []byte) error {
	type plain GateResult
	var p struct {
		plain
		CanaryTokS     *float64 `json:"canary_tok_s"`
		SiblingTokS    *float64 `json:"sibling_tok_s"`
		CanaryTTFTP95  *float64 `json:"canary_ttft_p95_ms"`
		SiblingTTFTP95 *float64 `json:"sibling_ttft_p95_ms"`
		TokSRatio      *float64 `json:"tok_s_ratio"`
		TTFTP95Ratio   *float64 `json:"ttft_p95_ratio"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*g = GateResult(p.plain)
	or := bench.FromFigure
	g.CanaryTokS, g.SiblingTokS = or(p.CanaryTokS), or(p.SiblingTokS)
	g.CanaryTTFTP95, g.SiblingTTFTP95 = or(p.CanaryTTFTP95), or(p.SiblingTTFTP95)
	g.TokSRatio, g.TTFTP95Ratio = or(p.TokSRatio), or(p.TTFTP95Ratio)
	return nil
}

// Line says the comparison in one line: "tok/s 1.02x, TTFT p95 0.97x
// qwen@gpu2's".
func (g *GateResult) Line() string {
	return fmt.Sprintf("tok/s %sx, TTFT p95 %sx %s's", figureText(g.TokSRatio, "%.2f"), figureText(g.TTFTP95Ratio, "%.2f"), g.Sibling)
}

// side is one replica's pooled rounds.
type side struct {
	tokens   int
	seconds  float64
	ttfts    []float64
	failed   int
	unknown  string // why its figures are unknown ("" when known)
	anyRound bool
}

func (s *side) add(out *bench.Result, err error) {
	if out != nil {
		s.failed += out.RequestsFailed
		if out.Measured() && bench.Known(out.DurationS) && out.DurationS > 0 {
			s.anyRound = true
			s.tokens += out.OutputTokens
			s.seconds += out.DurationS
			for _, row := range out.Requests {
				if row.OK {
					s.ttfts = append(s.ttfts, row.TTFTMs)
				}
			}
		}
	}
	if err != nil && s.unknown == "" {
		s.unknown = err.Error()
	}
}

func (s *side) tokS() float64 {
	if !s.anyRound || s.unknown != "" {
		return math.NaN()
	}
	return float64(s.tokens) / s.seconds
}

func (s *side) ttftP95() float64 {
	if s.unknown != "" {
		return math.NaN()
	}
	v := append([]float64(nil), s.ttfts...)
	sort.Float64s(v)
	return bench.Percentile(v, 95)
}

// gate benchmarks canary and sibling in interleaved rounds and judges the
// canary by Config.Rollout. It holds the sibling's service key meanwhile,
// so that no other job changes it. A missing sibling, or a figure not
// measured, fails the gate with the reason (it fails closed). The error is
// for the job's end only (the sibling could not be held).
func (r *Runbook) gate(ctx context.Context, canary, sibling *target, rep Reporter) (*GateResult, error) {
	p := r.withBenchDefaults(BenchParams{})
	g := &GateResult{Canary: canary.name, Rounds: gateRounds, Load: p,
		MinTokSRatio: r.cfg.Rollout.MinTokSRatio, MaxTTFTP95Ratio: r.cfg.Rollout.MaxTTFTP95Ratio,
		CanaryTokS: math.NaN(), SiblingTokS: math.NaN(), CanaryTTFTP95: math.NaN(), SiblingTTFTP95: math.NaN(),
		TokSRatio: math.NaN(), TTFTP95Ratio: math.NaN()}
	st := begin(rep, "gate", "benchmarking canary %s against its sibling", canary.name)
	if sibling == nil {
		g.Failed = []string{"no unchanged sibling to compare the canary with (the group has one replica): the gate cannot pass"}
		st.fail(errors.New(g.Failed[0]))
		return g, nil
	}
	g.Sibling = sibling.name
	release, err := r.holdService(ctx, sibling, rep)
	if err != nil {
		return g, st.fail(err)
	}
	defer release()
	st.progress("%d rounds each, interleaved (%s, %s, ...), %d prompts at concurrency %d, %d tokens in, %d out, straight to each replica",
		gateRounds, canary.name, sibling.name, p.Prompts, p.Concurrency, p.InputLen, p.OutputLen)
	var a, b side
	for i := 0; i < gateRounds; i++ {
		for _, x := range []struct {
			t *target
			s *side
		}{{canary, &a}, {sibling, &b}} {
			out, err := bench.Run(ctx, bench.Options{URL: x.t.cfg.URL, Dial: x.t.dial, Prompts: p.Prompts, Concurrency: p.Concurrency,
				InputLen: p.InputLen, OutputLen: p.OutputLen, Timeout: 10 * time.Minute})
			if ctx.Err() != nil {
				return g, st.fail(ctx.Err())
			}
			if err != nil {
				err = fmt.Errorf("%s round %d: %w", x.t.name, i+1, err)
			} else if out != nil && !out.Measured() {
				err = fmt.Errorf("%s round %d: no request succeeded", x.t.name, i+1)
			}
			x.s.add(out, err)
			if out != nil && bench.Known(out.OutputTokS) {
				st.progress("round %d, %s: %.1f tok/s, TTFT p99 %s ms", i+1, x.t.name, out.OutputTokS, figureText(out.TTFT.P99, "%.0f"))
			}
		}
	}
	g.FailedRequests = a.failed + b.failed
	g.CanaryTokS, g.SiblingTokS = a.tokS(), b.tokS()
	g.CanaryTTFTP95, g.SiblingTTFTP95 = a.ttftP95(), b.ttftP95()
	judge(g, a.unknown, b.unknown)
	if g.Pass {
		st.done("passed: %s (%s %.1f tok/s, %s %.1f tok/s)", g.Line(), canary.name, g.CanaryTokS, sibling.name, g.SiblingTokS)
	} else {
		st.fail(errors.New("failed: " + joinFailed(g.Failed)))
	}
	return g, nil
}

func joinFailed(f []string) string { return strings.Join(f, "; ") }

// judge sets g's ratios, Pass and Failed from its figures; canaryWhy and
// siblingWhy say why a side's figures are unknown ("": known).
func judge(g *GateResult, canaryWhy, siblingWhy string) {
	g.Failed = nil
	g.TokSRatio, g.TTFTP95Ratio = math.NaN(), math.NaN()
	known := func(f float64) bool { return bench.Known(f) && f > 0 }
	if known(g.CanaryTokS) && known(g.SiblingTokS) {
		g.TokSRatio = g.CanaryTokS / g.SiblingTokS
	}
	if known(g.CanaryTTFTP95) && known(g.SiblingTTFTP95) {
		g.TTFTP95Ratio = g.CanaryTTFTP95 / g.SiblingTTFTP95
	}
	why := func(what string) string {
		switch {
		case canaryWhy != "":
			return fmt.Sprintf("%s unknown, so the gate fails: %s", what, canaryWhy)
		case siblingWhy != "":
			return fmt.Sprintf("%s unknown, so the gate fails: %s", what, siblingWhy)
		}
		return what + " unknown (not measured), so the gate fails"
	}
	switch {
	case !bench.Known(g.TokSRatio):
		g.Failed = append(g.Failed, why("tok/s"))
	case g.TokSRatio < g.MinTokSRatio:
		g.Failed = append(g.Failed, fmt.Sprintf("tok/s %.2fx the sibling's (%.1f against %.1f), gate %gx", g.TokSRatio, g.CanaryTokS, g.SiblingTokS, g.MinTokSRatio))
	}
	switch {
	case !bench.Known(g.TTFTP95Ratio):
		g.Failed = append(g.Failed, why("TTFT p95"))
	case g.TTFTP95Ratio > g.MaxTTFTP95Ratio:
		g.Failed = append(g.Failed, fmt.Sprintf("TTFT p95 %.2fx the sibling's (%.0f ms against %.0f ms), gate %gx", g.TTFTP95Ratio, g.CanaryTTFTP95, g.SiblingTTFTP95, g.MaxTTFTP95Ratio))
	}
	g.Pass = len(g.Failed) == 0
}
