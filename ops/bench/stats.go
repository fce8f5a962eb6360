package bench

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stat is the mean, median and 99th percentile of a latency, in ms.
// Percentiles interpolate linearly between order statistics (numpy's default,
// as bench_serving and vllm bench serve use).
type Stat struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
}

// statOf is v's statistics; unknown when v is empty.
func statOf(v []float64) Stat {
	if len(v) == 0 {
		return unknownStat()
	}
	sort.Float64s(v)
	var sum float64
	for _, x := range v {
		sum += x
	}
	return Stat{Mean: round(sum / float64(len(v))), P50: round(percentile(v, 50)), P99: round(percentile(v, 99))}
}

// figureDigits is how many significant digits a figure keeps: far more than
// any measurement here carries, far fewer than float noise needs.
const figureDigits = 6

// round rounds x to figureDigits significant digits. Figures are rounded where
// they are made, so that every reader, JSON included, sees the same number
// and no float noise (0.6679999999999999 reads 0.668).
func round(x float64) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', figureDigits, 64), 64)
	if err != nil {
		return x
	}
	return v
}

// Percentile is the p-th percentile of v (sorted ascending), by linear
// interpolation between the closest ranks, as the benchmark's own figures
// are; NaN (unknown) when v is empty.
func Percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return round(percentile(v, p))
}

// percentile of sorted v, linear interpolation.
func percentile(v []float64, p float64) float64 {
	if len(v) == 1 {
		return v[0]
	}
	pos := p / 100 * float64(len(v)-1)
	lo := int(math.Floor(pos))
	if lo >= len(v)-1 {
		return v[len(v)-1]
	}
	f := pos - float64(lo)
	return v[lo] + f*(v[lo+1]-v[lo])
}

// Result is one benchmark run, in the engines' definitions: OutputTokS is the
// sum of usage.completion_tokens of the successful requests over the wall time
// from the first dispatch to the last completion (DurationS); TTFT is the time
// to the first non-empty content chunk; TPOT = (E2E - TTFT) / (tokens - 1) per
// request; ITL the gaps between content chunks (all requests pooled);
// PerStreamTokS = 1000 / mean TPOT. AcceptRate = (AcceptLen - 1) / k, drafts
// accepted over drafts proposed; EngineAcceptRate is what the engine printed
// (a cross-check: SGLang changed its meaning). Failed requests are counted in
// RequestsFailed and described in Errors, never folded into the figures.
type Result struct {
	OutputTokS       float64      `json:"output_tok_s"`
	PerStreamTokS    float64      `json:"per_stream_tok_s"`
	TTFT             Stat         `json:"ttft_ms"`
	TPOT             Stat         `json:"tpot_ms"`
	ITL              Stat         `json:"itl_ms"`
	E2E              Stat         `json:"e2e_ms"`
	RequestsOK       int          `json:"requests_ok"`
	RequestsFailed   int          `json:"requests_failed"`
	DurationS        float64      `json:"duration_s"`
	OutputTokens     int          `json:"output_tokens"`
	AcceptLen        float64      `json:"accept_len"`
	AcceptRate       float64      `json:"accept_rate"`
	EngineAcceptRate float64      `json:"engine_accept_rate"`
	AcceptSource     string       `json:"accept_source,omitempty"`
	Settings         Settings     `json:"settings"`
	Errors           []string     `json:"errors,omitempty"`
	Requests         []RequestRow `json:"requests,omitempty"`

	// Additions: context for the table and for comparisons.
	Model             string  `json:"model,omitempty"`
	Concurrency       int     `json:"concurrency,omitempty"`
	RequestRate       float64 `json:"request_rate,omitempty"` // 0: all at once
	InputTokens       int     `json:"input_tokens"`
	PromptFormat      string  `json:"prompt_format,omitempty"` // "token_ids", "text" or "chat"
	LifetimeAcceptLen float64 `json:"lifetime_accept_len,omitempty"`
	// AcceptOverWindow: AcceptLen was measured over the benchmark window
	// (false for a fallback, which AcceptSource names).
	AcceptOverWindow bool `json:"accept_over_window"`
	// AcceptCause says why AcceptLen or AcceptRate is unknown although
	// acceptance was measured for (Cause*); AcceptUnknown says it for a
	// person, in a few words. Both "" when they are known, or when the run
	// measured no acceptance (no speculation).
	AcceptCause   string `json:"accept_cause,omitempty"`
	AcceptUnknown string `json:"accept_unknown,omitempty"`
	// EngineSteps are the speculative steps the engine reported running
	// while the run's requests ran, most seen first: what SGLang's adaptive
	// mode chose at this load (its caller samples them); empty when not
	// sampled or the engine did not say.
	EngineSteps []StepsSeen `json:"engine_steps,omitempty"`
}

// StepsSeen is one steps value an engine reported running, and in how many
// of the samples taken during a run.
type StepsSeen struct {
	Steps   int `json:"steps"`
	Samples int `json:"samples"`
}

// Measured reports whether r measured anything: at least one request
// succeeded. A run with none has no figures: it is not a result to keep
// beside others (history stores none).
func (r *Result) Measured() bool { return r != nil && r.RequestsOK > 0 }

// compute fills the figures from the rows and the wall time.
func (r *Result) compute(rows []RequestRow, wall time.Duration) {
	var ttft, tpot, itl, e2e []float64
	for i := range rows {
		row := &rows[i]
		if !row.OK {
			r.RequestsFailed++
			continue
		}
		r.RequestsOK++
		r.OutputTokens += row.OutputTokens
		r.InputTokens += row.PromptTokens
		ttft = append(ttft, row.TTFTMs)
		e2e = append(e2e, row.E2EMs)
		if row.OutputTokens > 1 {
			tpot = append(tpot, row.TPOTMs)
		}
		for _, g := range row.itl {
			itl = append(itl, ms(g))
		}
	}
	r.DurationS = round(wall.Seconds())
	r.OutputTokS, r.PerStreamTokS = Unknown(), Unknown()
	if wall > 0 && r.RequestsOK > 0 {
		r.OutputTokS = round(float64(r.OutputTokens) / wall.Seconds())
	}
	r.TTFT, r.TPOT, r.ITL, r.E2E = statOf(ttft), statOf(tpot), statOf(itl), statOf(e2e)
	if r.TPOT.Mean > 0 {
		r.PerStreamTokS = round(1000 / r.TPOT.Mean)
	}
}

// errorCounts groups equal messages, in order of first appearance.
func errorCounts(rows []RequestRow) []string {
	var order []string
	n := map[string]int{}
	for _, row := range rows {
		if row.OK {
			continue
		}
		if n[row.Error] == 0 {
			order = append(order, row.Error)
		}
		n[row.Error]++
	}
	out := make([]string, 0, len(order))
	for i, msg := range order {
		if i == 10 {
			out = append(out, fmt.Sprintf("... and %d other kinds of failure", len(order)-10))
			break
		}
		word := "requests"
		if n[msg] == 1 {
			word = "request"
		}
		out = append(out, fmt.Sprintf("%d %s: %s", n[msg], word, msg))
	}
	return out
}

// Table renders r like sglang bench_serving's result block (labels padded to
// 40 columns, figures with 2 decimals, "—" for a figure not measured), then
// one line per entry of Errors.
func (r *Result) Table() string {
	var b strings.Builder
	line := func(label string, v any) {
		switch x := v.(type) {
		case float64:
			if !Known(x) {
				fmt.Fprintf(&b, "%-40s %s\n", label, Dash)
				return
			}
			fmt.Fprintf(&b, "%-40s %.2f\n", label, x)
		default:
			fmt.Fprintf(&b, "%-40s %v\n", label, x)
		}
	}
	head := func(t string, fill byte) {
		pad := 50 - len(t)
		if pad < 0 {
			pad = 0
		}
		b.WriteString(strings.Repeat(string(fill), pad/2) + t + strings.Repeat(string(fill), pad-pad/2) + "\n")
	}
	head(" Serving Benchmark Result ", '=')
	if r.Model != "" {
		line("Model:", r.Model)
	}
	rate := "inf"
	if r.RequestRate > 0 {
		rate = fmt.Sprintf("%.2f", r.RequestRate)
	}
	line("Traffic request rate:", rate)
	if r.Concurrency > 0 {
		line("Max request concurrency:", r.Concurrency)
	}
	line("Successful requests:", r.RequestsOK)
	line("Failed requests:", r.RequestsFailed)
	if !r.Measured() {
		b.WriteString("No request succeeded: nothing was measured (" + Dash + ").\n")
	}
	line("Benchmark duration (s):", r.DurationS)
	line("Total input tokens:", r.InputTokens)
	line("Total generated tokens:", r.OutputTokens)
	reqS := Unknown()
	if r.DurationS > 0 && r.Measured() {
		reqS = float64(r.RequestsOK) / r.DurationS
	}
	line("Request throughput (req/s):", reqS)
	line("Output token throughput (tok/s):", r.OutputTokS)
	line("Per-stream decode (tok/s):", r.PerStreamTokS)
	if r.AcceptCause != "" && !KnownAcceptLen(r.AcceptLen) {
		line("Accept length:", Dash+" ("+r.AcceptUnknown+")")
	}
	if KnownAcceptLen(r.AcceptLen) {
		line("Accept length:", r.AcceptLen)
		rate := any(r.AcceptRate)
		if !Known(r.AcceptRate) && r.AcceptUnknown != "" {
			rate = Dash + " (" + r.AcceptUnknown + ")"
		}
		line("Accept rate (drafts accepted/proposed):", rate)
		if r.EngineAcceptRate > 0 {
			line("Engine's printed accept rate:", r.EngineAcceptRate)
		}
		if r.LifetimeAcceptLen > 0 {
			line("Lifetime accept length (server_info):", r.LifetimeAcceptLen)
		}
		if r.AcceptSource != "" {
			line("Acceptance measured from:", r.AcceptSource)
		}
	}
	section := func(title, short string, s Stat) {
		head(title, '-')
		line("Mean "+short+" (ms):", s.Mean)
		line("Median "+short+" (ms):", s.P50)
		line("P99 "+short+" (ms):", s.P99)
	}
	section("Time to First Token", "TTFT", r.TTFT)
	section("Time per Output Token (excl. 1st token)", "TPOT", r.TPOT)
	section("Inter-Token Latency", "ITL", r.ITL)
	section("End-to-End Latency", "E2E Latency", r.E2E)
	head("", '=')
	for _, e := range r.Errors {
		b.WriteString("error: " + e + "\n")
	}
	return b.String()
}

// Dash stands for a figure that was not measured, wherever a figure is
// shown as text.
const Dash = "—"

// Progress is a snapshot of a running benchmark.
type Progress struct {
	Warmup       bool // the warm-up requests (excluded from the result)
	Done, Total  int
	OK, Failed   int
	OutputTokens int // of the finished successful requests
	Elapsed      time.Duration
	Final        bool
}

// TokS is the output tokens of finished requests per second so far.
func (p Progress) TokS() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.OutputTokens) / p.Elapsed.Seconds()
}

// FormatProgress is one line: "37/100 requests (35 ok, 2 failed), 1234.5 tok/s, 12.3s".
func FormatProgress(p Progress) string {
	prefix := ""
	if p.Warmup {
		prefix = "warm-up: "
	}
	return fmt.Sprintf("%s%d/%d requests (%d ok, %d failed), %.1f tok/s, %.1fs",
		prefix, p.Done, p.Total, p.OK, p.Failed, p.TokS(), p.Elapsed.Seconds())
}
