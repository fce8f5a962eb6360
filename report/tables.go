package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// SweepTables renders one table per concurrency of pts: per setting its
// figures, the best by metric marked (ops.BestAt, the one choice the chart
// and a per-load proposal read too), the current setting marked, and beside
// each its previous result (prev[i] for pts[i], nil when none). Topk and
// draft token columns show when the points vary them. A figure a point did
// not measure is "—"; the lines after the tables say why, once per cause
// (UnknownNotes). Points that ran a per-load form are one table
// (PerLoadTable).
func SweepTables(pts []ops.SweepPoint, prev []*store.BenchResult, metric string, current ops.Setting) []string {
	if metric == "" {
		metric = ops.MetricOutputTokS
	}
	var out []string
	if t := PerLoadTable(pts, prev); t != "" {
		out = append(out, t)
	}
	for _, c := range concurrencies(pts) {
		if t := sweepTable(pts, prev, c, metric, current); t != "" {
			out = append(out, t)
		}
	}
	return append(out, UnknownNotes(pts)...)
}

// sweepTable is the table of the fixed settings of pts at concurrency c;
// "" when none ran there.
func sweepTable(pts []ops.SweepPoint, prev []*store.BenchResult, c int, metric string, current ops.Setting) string {
	best := ops.BestAt(pts, c, metric)
	var b strings.Builder
	fmt.Fprintf(&b, "concurrency %d (best by %s):\n", c, metric)
	label := func(p ops.SweepPoint) string { return fmt.Sprintf("%-6d", p.Steps) }
	head := fmt.Sprintf("%-6s", "steps")
	if grid(pts) {
		label = func(p ops.SweepPoint) string { return fmt.Sprintf("%-6d %4d %5d", p.Steps, p.TopK, p.DraftTokens) }
		head = fmt.Sprintf("%-6s %4s %5s", "steps", "topk", "draft")
	}
	fmt.Fprintf(&b, "%s %s  %s\n", head, figureHead, "previous")
	rows := 0
	for _, i := range bySetting(pts) {
		p := pts[i]
		if p.Concurrency != c || p.PerLoad != nil {
			continue
		}
		rows++
		mark := ""
		if sameSetting(p, current) {
			mark = "  (now)"
		}
		if !p.OK {
			fmt.Fprintf(&b, "%s failed: %s%s\n", label(p), p.Error, mark)
			continue
		}
		if best != nil && p.Setting() == best.Setting() {
			mark = "  <- best" + mark
		}
		was := "none at this load"
		if i < len(prev) && prev[i] != nil {
			was = previousText(*prev[i], p.OutputTokS)
		}
		fmt.Fprintf(&b, "%s %s  %s%s\n", label(p), figureCells(p), was, mark)
	}
	if rows == 0 {
		return ""
	}
	return strings.TrimRight(b.String(), "\n")
}

// bySetting are the indices of pts ordered by steps, then topk and draft
// tokens (a table reads down the steps, whatever order they ran in).
func bySetting(pts []ops.SweepPoint) []int {
	idx := make([]int, len(pts))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		pa, pb := pts[a], pts[b]
		return cmp.Or(cmp.Compare(pa.Steps, pb.Steps), cmp.Compare(pa.TopK, pb.TopK), cmp.Compare(pa.DraftTokens, pb.DraftTokens))
	})
	return idx
}

// figureHead heads the figures figureCells renders.
var figureHead = fmt.Sprintf("%9s %10s %10s %7s %9s %9s", "tok/s", "per-stream", "accept len", "accept", "TTFT p50", "TTFT p99")

// figureCells are p's figures as table cells, "—" for each it did not
// measure.
func figureCells(p ops.SweepPoint) string {
	ttft50, ttft99 := ops.Unknown(), ops.Unknown()
	if p.Bench != nil {
		ttft50, ttft99 = p.Bench.TTFT.P50, p.Bench.TTFT.P99
	}
	return fmt.Sprintf("%9s %10s %10s %7s %9s %9s",
		cell(p.OutputTokS, p.Measured(ops.MetricOutputTokS), "%.1f"), cell(p.PerStreamTokS, p.Measured(ops.MetricPerStreamTokS), "%.1f"),
		cell(p.AcceptLen, p.Measured(ops.MetricAcceptLen), "%.2f"), cell(100*p.AcceptRate, p.Measured(ops.FigureAcceptRate), "%.0f%%"),
		cell(ttft50, ops.Known(ttft50), "%.0f ms"), cell(ttft99, ops.Known(ttft99), "%.0f ms"))
}

// Cell is v in format when known, else "—": a figure in a table.
func Cell(v float64, known bool, format string) string { return cell(v, known, format) }

// cell is v in format when known, else "—".
func cell(v float64, known bool, format string) string {
	if !known {
		return ops.Dash
	}
	return fmt.Sprintf(format, v)
}

// previousText is a stored result beside a figure now: "250.0 (+4.0%, #12)".
func previousText(prev store.BenchResult, now float64) string {
	return fmt.Sprintf("%s (%s, %s)", cell(prev.OutputTokS, ops.Known(prev.OutputTokS), "%.1f"), pctChange(prev.OutputTokS, now), ResultSource(prev))
}

// pctChange is the change from a to b in percent, "n/a" when either is
// unknown or a is 0.
func pctChange(a, b float64) string {
	if a == 0 || !ops.Known(a) || !ops.Known(b) {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", (b-a)/a*100)
}

// PerLoadTable renders the points of pts that ran a per-load form (an
// applied `mtp per-load`): one row per concurrency naming what ran there
// (ops.SweepPoint.Ran: the steps the engine reported choosing, else the
// candidates it chose among), its figures ("—" where not measured) and,
// beside it, prev[i]: what ran before at that load (another job's newest
// result there, of any form, named by its settings unless the same form).
// "" when no point ran a per-load form.
func PerLoadTable(pts []ops.SweepPoint, prev []*store.BenchResult) string {
	var b strings.Builder
	width := len("ran")
	for _, p := range pts {
		if p.PerLoad != nil {
			width = max(width, len(p.Ran()))
		}
	}
	rows := 0
	for i, p := range pts {
		if p.PerLoad == nil {
			continue
		}
		if rows == 0 {
			fmt.Fprintf(&b, "per load, at each concurrency:\n%-11s  %-*s %s  %s\n", "concurrency", width, "ran", figureHead, "before")
		}
		rows++
		if !p.OK {
			fmt.Fprintf(&b, "%-11d  %-*s failed: %s\n", p.Concurrency, width, p.Ran(), p.Error)
			continue
		}
		was := "none at this load"
		if i < len(prev) && prev[i] != nil {
			was = previousText(*prev[i], p.OutputTokS)
			if prev[i].Settings == SettingsKey(p.Spec) {
				was += " same form"
			} else {
				was += " at " + prev[i].Settings
			}
		}
		fmt.Fprintf(&b, "%-11d  %-*s %s  %s\n", p.Concurrency, width, p.Ran(), figureCells(p), was)
	}
	return strings.TrimRight(b.String(), "\n")
}
