package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/opsbot/opsbot/ops"
)

// UnknownNotes say why figures of pts are "—", one line per cause, however
// many benchmarks it touched: where (the concurrencies and settings), why,
// and, where the user can change it, what to change (a config key). Failed
// points are not among them: their rows say why they failed.
func UnknownNotes(pts []ops.SweepPoint) []string {
	type group struct {
		figure, why string
		at          []ops.SweepPoint
	}
	var order []string
	groups := map[string]*group{}
	add := func(key, figure, why string, p ops.SweepPoint) {
		g := groups[key]
		if g == nil {
			g = &group{figure: figure, why: why}
			groups[key] = g
			order = append(order, key)
		}
		g.at = append(g.at, p)
	}
	benchmarked := 0
	for _, p := range pts {
		if !p.OK {
			continue
		}
		benchmarked++
		if key, figure, why := acceptUnknown(p); key != "" {
			add(key, figure, why, p)
		}
		if !ops.Known(p.PerStreamTokS) { // what a benchmark reports when no request gave two tokens
			add("per-stream", "per-stream", "no request produced two tokens", p)
		}
	}
	out := make([]string, 0, len(order))
	for _, key := range order {
		g := groups[key]
		out = append(out, fmt.Sprintf("%s %s at %d of %d benchmarks (%s): %s%s", g.figure, ops.Dash, len(g.at), benchmarked,
			where(g.at), g.why, remedy(key, g.at)))
	}
	return out
}

// acceptUnknown is why p's accept length or rate is unknown: a key for its
// cause, the figure, and why (key "" when both are known).
func acceptUnknown(p ops.SweepPoint) (key, figure, why string) {
	cause, text := "", ""
	if p.Bench != nil {
		cause, text = p.Bench.AcceptCause, p.Bench.AcceptUnknown
	}
	switch {
	case !p.Measured(ops.MetricAcceptLen) && cause != "":
		return cause, "accept length", text
	case !p.Measured(ops.MetricAcceptLen) && p.PerLoad == nil && p.Steps == 0:
		return "no_speculation", "accept length", "speculation off, nothing to accept"
	case !p.Measured(ops.MetricAcceptLen):
		return "not_asked", "accept length", "acceptance was not measured"
	case !p.Measured(ops.FigureAcceptRate) && cause == ops.CauseDraftsUnknown:
		return cause, "acceptance", "the drafts proposed per step are unknown (the engine chose its steps per batch), so the share accepted is not computed; the accept length is measured"
	case !p.Measured(ops.FigureAcceptRate):
		return "rate", "acceptance", "the drafts proposed per step are unknown"
	}
	return "", "", ""
}

// remedy is what the user can change for the cause key, as the sentence's
// end ("" when nothing they can change would help).
func remedy(key string, at []ops.SweepPoint) string {
	if key != ops.CauseShortRun {
		return ""
	}
	out := 0
	for _, p := range at {
		if p.Bench != nil {
			out = max(out, p.Bench.Settings.OutputLen)
		}
	}
	these := ""
	if out > 0 {
		these = fmt.Sprintf(" (these ran %d tokens per request)", out)
	}
	return "; raise bench.output_len in the config" + these + ", or bench.prompts, so that each run outlasts one window"
}

// where names the points at: "concurrency 32: steps 9, 10; concurrency 64:
// steps 9", or, for a per-load form, "concurrency 1, 8".
func where(at []ops.SweepPoint) string {
	var concs []int
	steps := map[int][]string{}
	perLoad := true
	at = slices.Clone(at)
	slices.SortStableFunc(at, func(a, b ops.SweepPoint) int {
		return cmp.Or(cmp.Compare(a.Concurrency, b.Concurrency), cmp.Compare(a.Steps, b.Steps), cmp.Compare(a.TopK, b.TopK))
	})
	for _, p := range at {
		if !slices.Contains(concs, p.Concurrency) {
			concs = append(concs, p.Concurrency)
		}
		if p.PerLoad == nil {
			perLoad = false
			label := fmt.Sprint(p.Steps)
			if p.TopK > 1 {
				label += fmt.Sprintf(" (topk %d, draft %d)", p.TopK, p.DraftTokens)
			}
			steps[p.Concurrency] = append(steps[p.Concurrency], label)
		}
	}
	words := make([]string, len(concs))
	for i, c := range concs {
		words[i] = fmt.Sprint(c)
	}
	if perLoad {
		return "concurrency " + strings.Join(words, ", ")
	}
	for i, c := range concs {
		words[i] = fmt.Sprintf("concurrency %d: steps %s", c, strings.Join(steps[c], ", "))
	}
	return strings.Join(words, "; ")
}
