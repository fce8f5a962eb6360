package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// concurrencies returns the concurrencies of pts in their first order.
func concurrencies(pts []ops.SweepPoint) []int {
	var cs []int
	for _, p := range pts {
		if !slices.Contains(cs, p.Concurrency) {
			cs = append(cs, p.Concurrency)
		}
	}
	return cs
}

// grid reports whether pts vary topk or draft tokens, not only steps (draft
// tokens that follow steps, with topk 1, do not count).
func grid(pts []ops.SweepPoint) bool {
	for _, p := range pts {
		if s, s0 := p.Setting(), pts[0].Setting(); s.TopK != s0.TopK || s.DraftTokens != s0.DraftTokens {
			return true
		}
	}
	return false
}

// sameSetting reports whether p runs cur: its steps, and its topk and draft
// tokens where both know them.
func sameSetting(p ops.SweepPoint, cur ops.Setting) bool {
	return p.PerLoad == nil && p.Steps == cur.Steps && (p.TopK == 0 || cur.TopK == 0 || p.TopK == cur.TopK) &&
		(p.DraftTokens == 0 || cur.DraftTokens == 0 || p.DraftTokens == cur.DraftTokens)
}

// fixed are the points of pts that ran a fixed setting (not a per-load form).
func fixed(pts []ops.SweepPoint) []ops.SweepPoint {
	var out []ops.SweepPoint
	for _, p := range pts {
		if p.PerLoad == nil {
			out = append(out, p)
		}
	}
	return out
}

// SweepChart renders a job's points as one PNG, in memory, titled with
// info (service, job, date). Points of fixed settings (a sweep, a tune) are
// charted by steps (sweepChart); points that all ran a per-load form (an
// applied `mtp per-load`) by concurrency, before (prev[i], the result at
// that load before the job) and after (perLoadChart).
func SweepChart(pts []ops.SweepPoint, prev []*store.BenchResult, metric string, current ops.Setting, info ChartInfo) ([]byte, error) {
	if len(pts) > 0 && len(fixed(pts)) == 0 {
		b, _, err := perLoadChart(pts, prev, info)
		return b, err
	}
	b, _, err := sweepChart(pts, metric, current, info)
	return b, err
}

// sweepChart charts points by steps in two panels: output tok/s relative
// to the fastest at each load (top: each concurrency on its own scale, 100%
// its fastest, whose tok/s the legend gives) and accept length (bottom); a
// line per concurrency (per concurrency, topk and draft tokens when the
// points vary them), broken where a point tried there measured nothing
// (failed, or the figure unknown: a gap, never a point at 0); the best point
// of each load (ops.BestAt by metric) a square; the current setting marked
// (a dashed vertical line at its steps and a ring around its points;
// current.Steps 0: none); a per-load form measured beside them (a tune's
// proposal) a dashed level line in its load's colour; the legend in a box
// to the right, where it covers no line. It also says where it drew.
func sweepChart(pts []ops.SweepPoint, metric string, current ops.Setting, info ChartInfo) ([]byte, chartLayout, error) {
	var lay chartLayout
	fx := fixed(pts)
	isGrid := len(fx) > 0 && grid(fx)
	top, bottom := chartPanels(metric)
	panels := [2]*plot.Plot{top, bottom}
	ring := draw.GlyphStyle{Color: currentColor, Radius: vg.Points(chartRingRadius), Shape: thickRing{}}
	scale := fastest(pts)
	colors := map[int]color.Color{}
	var entries []chartEntry
	for i, k := range chartSeriesOf(fx, isGrid) {
		s := k.points(fx, isGrid, current, scale[k.conc])
		if len(s.xy[0]) == 0 && len(s.xy[1]) == 0 {
			continue
		}
		clr := plotutil.Color(len(lay.Colors))
		lay.Colors = append(lay.Colors, clr)
		if _, ok := colors[k.conc]; !ok {
			colors[k.conc] = clr
		}
		e, err := addSeries(panels, k.name(isGrid, fx, metric), s, clr, i, ring)
		if err != nil {
			return nil, lay, err
		}
		entries = append(entries, e)
	}
	best, err := markBest(panels, fx, metric, scale, colors)
	if err != nil {
		return nil, lay, err
	}
	if best.name != "" {
		entries = append(entries, best)
	}
	if e, err := markPerLoad(panels[0], pts, scale, colors); err != nil {
		return nil, lay, err
	} else if e.name != "" {
		entries = append(entries, e)
	}
	for _, p := range panels {
		padAxes(p)
	}
	lay.CurrentX = [2]int{-1, -1}
	if current.Steps > 0 {
		e, err := markCurrent(panels, current, isGrid, ring)
		if err != nil {
			return nil, lay, err
		}
		entries = append(entries, e)
	}
	png, data, err := renderChart(info.Title(), panels, entries, &lay)
	if err != nil {
		return nil, lay, err
	}
	for i, p := range panels {
		if current.Steps > 0 && p.Y.Max >= p.Y.Min {
			lay.CurrentX[i] = toPixel(p, data[i], float64(current.Steps), 0).X
		}
	}
	for _, c := range concurrencies(fx) {
		if b := ops.BestAt(fx, c, metric); b != nil && scale[c] > 0 {
			lay.Best = append(lay.Best, toPixel(panels[0], data[0], float64(b.Steps), 100*b.OutputTokS/scale[c]))
		}
	}
	return png, lay, nil
}

// padAxes widens p's axes around what it plots, by half a step and a
// twentieth of the figures' range, so that no mark sits on a panel's edge.
func padAxes(p *plot.Plot) {
	if p.X.Max < p.X.Min {
		return // nothing plotted
	}
	p.X.Min, p.X.Max = p.X.Min-0.5, p.X.Max+0.5
	dy := (p.Y.Max - p.Y.Min) / 20
	if dy == 0 {
		dy = max(math.Abs(p.Y.Max)/20, 0.5)
	}
	p.Y.Min, p.Y.Max = p.Y.Min-dy, p.Y.Max+dy
}

// fastest is the highest output tok/s measured at each concurrency of pts
// by a fixed setting (by a per-load form where no fixed setting measured
// one): the 100% of its line.
func fastest(pts []ops.SweepPoint) map[int]float64 {
	out := map[int]float64{}
	for _, perLoad := range []bool{false, true} {
		for _, p := range pts {
			if (p.PerLoad != nil) != perLoad || !p.Measured(ops.MetricOutputTokS) {
				continue
			}
			if _, done := out[p.Concurrency]; done && perLoad {
				continue
			}
			out[p.Concurrency] = max(out[p.Concurrency], p.OutputTokS)
		}
	}
	return out
}

// chartSeries is one line of the chart: a concurrency, and its topk and
// draft tokens when the points vary them (zero otherwise).
type chartSeries struct {
	conc, topk, draft int
}

// chartSeriesOf lists the series of pts in their first order; isGrid says
// the points vary topk or draft tokens (grid).
func chartSeriesOf(pts []ops.SweepPoint, isGrid bool) []chartSeries {
	var keys []chartSeries
	for _, p := range pts {
		k := chartSeries{conc: p.Concurrency}
		if isGrid {
			k.topk, k.draft = p.TopK, p.Setting().DraftTokens
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// name is k's legend entry: "concurrency 8: 1259.5 tok/s at best", with
// ", topk 2, draft 6" in a grid (draft when known); the tok/s of the load's
// fastest point, its 100%, on the series that holds it.
func (k chartSeries) name(isGrid bool, pts []ops.SweepPoint, metric string) string {
	name := fmt.Sprintf("concurrency %d", k.conc)
	if isGrid {
		name += fmt.Sprintf(", topk %d", k.topk)
		if k.draft > 0 {
			name += fmt.Sprintf(", draft %d", k.draft)
		}
	}
	if b := ops.BestAt(pts, k.conc, ops.MetricOutputTokS); b != nil && (!isGrid || (b.TopK == k.topk && b.Setting().DraftTokens == k.draft)) {
		name += fmt.Sprintf(": 100%% = %.1f tok/s", b.OutputTokS)
	}
	return name
}

// seriesPoints are a series' data: in each panel (tok/s relative to the
// load's fastest, then accept length) its measured points by steps, the
// runs of them unbroken by a point tried but not measured (segs: each is
// one line), and those that run the current setting (now).
type seriesPoints struct {
	xy, now [2]plotter.XYs
	segs    [2][]plotter.XYs
}

// points are k's data in pts (scale: the load's fastest tok/s, its 100%).
// A point that failed, or did not measure a panel's figure, is a gap in
// that panel's line.
func (k chartSeries) points(pts []ops.SweepPoint, isGrid bool, current ops.Setting, scale float64) seriesPoints {
	var mine []ops.SweepPoint
	for _, p := range pts {
		if p.Concurrency == k.conc && (!isGrid || (p.TopK == k.topk && p.Setting().DraftTokens == k.draft)) {
			mine = append(mine, p)
		}
	}
	slices.SortStableFunc(mine, func(a, b ops.SweepPoint) int { return a.Steps - b.Steps })
	var s seriesPoints
	figures := [2]string{ops.MetricOutputTokS, ops.MetricAcceptLen}
	for j, fig := range figures {
		var seg plotter.XYs
		for _, p := range mine {
			if !p.Measured(fig) || (j == 0 && !(scale > 0)) {
				if len(seg) > 0 {
					s.segs[j] = append(s.segs[j], seg)
				}
				seg = nil
				continue
			}
			y := p.AcceptLen
			if j == 0 {
				y = 100 * p.OutputTokS / scale
			}
			pt := plotter.XY{X: float64(p.Steps), Y: y}
			seg = append(seg, pt)
			s.xy[j] = append(s.xy[j], pt)
			if current.Steps > 0 && sameSetting(p, current) {
				s.now[j] = append(s.now[j], pt)
			}
		}
		if len(seg) > 0 {
			s.segs[j] = append(s.segs[j], seg)
		}
	}
	return s
}

// chartPanels are the chart's two panels, titled and labelled, with a grid
// and a tick at every whole steps value: output tok/s relative to the
// fastest at each load (top; the title names metric when the best is chosen
// by another) and accept length (bottom).
func chartPanels(metric string) (top, bottom *plot.Plot) {
	top, bottom = plot.New(), plot.New()
	top.Title.Text = "output tok/s by steps, as % of the fastest at each load (each load on its own scale)"
	if metric != "" && metric != ops.MetricOutputTokS {
		top.Title.Text += "; best chosen by " + metric
	}
	top.Y.Label.Text = "% of the load's fastest"
	bottom.Title.Text = "accept length by steps (gaps: not measured)"
	bottom.X.Label.Text = "speculative steps"
	bottom.Y.Label.Text = "accept length"
	for _, p := range []*plot.Plot{top, bottom} {
		p.Add(plotter.NewGrid())
		p.X.Tick.Marker = integerTicks{}
	}
	return top, bottom
}

// addSeries draws a series in each panel: each unbroken run of its points
// as a line, its points as glyphs of shape in clr, and a ring around the
// current setting's. It returns the series' legend entry.
func addSeries(panels [2]*plot.Plot, name string, s seriesPoints, clr color.Color, shape int, ring draw.GlyphStyle) (chartEntry, error) {
	style := draw.LineStyle{Color: clr, Width: vg.Points(chartLineWidth)}
	glyph := draw.GlyphStyle{Color: clr, Radius: vg.Points(3), Shape: plotutil.Shape(shape)}
	for j := range panels {
		for _, seg := range s.segs[j] {
			if len(seg) < 2 {
				continue
			}
			l, err := plotter.NewLine(seg)
			if err != nil {
				return chartEntry{}, fmt.Errorf("chart %s: %w", name, err)
			}
			l.LineStyle = style
			panels[j].Add(l)
		}
		if len(s.xy[j]) > 0 {
			sc, err := plotter.NewScatter(s.xy[j])
			if err != nil {
				return chartEntry{}, fmt.Errorf("chart %s: %w", name, err)
			}
			sc.GlyphStyle = glyph
			panels[j].Add(sc)
		}
		if len(s.now[j]) > 0 {
			r, err := plotter.NewScatter(s.now[j])
			if err != nil {
				return chartEntry{}, fmt.Errorf("chart the current setting: %w", err)
			}
			r.GlyphStyle = ring
			panels[j].Add(r)
		}
	}
	return chartEntry{name: name, thumbs: []plot.Thumbnailer{lineThumb(style), glyphThumb(glyph)}}, nil
}

// bestGlyph is the square on the best point of a load, in its line's colour.
func bestGlyph(clr color.Color) draw.GlyphStyle {
	return draw.GlyphStyle{Color: clr, Radius: vg.Points(chartBestRadius), Shape: draw.BoxGlyph{}}
}

// markBest draws a square on each load's best point of pts by metric
// (ops.BestAt) in both panels, where the figure was measured, in the load's
// colour, and returns the legend entry saying what the squares are (none
// when no load has a best point).
func markBest(panels [2]*plot.Plot, pts []ops.SweepPoint, metric string, scale map[int]float64, colors map[int]color.Color) (chartEntry, error) {
	n := 0
	for _, c := range concurrencies(pts) {
		b := ops.BestAt(pts, c, metric)
		if b == nil || colors[c] == nil || !(scale[c] > 0) {
			continue
		}
		n++
		for j, fig := range []string{ops.MetricOutputTokS, ops.MetricAcceptLen} {
			if !b.Measured(fig) {
				continue
			}
			y := b.AcceptLen
			if j == 0 {
				y = 100 * b.OutputTokS / scale[c]
			}
			sc, err := plotter.NewScatter(plotter.XYs{{X: float64(b.Steps), Y: y}})
			if err != nil {
				return chartEntry{}, fmt.Errorf("chart the best point at concurrency %d: %w", c, err)
			}
			sc.GlyphStyle = bestGlyph(colors[c])
			panels[j].Add(sc)
		}
	}
	if n == 0 {
		return chartEntry{}, nil
	}
	what := "best at each load"
	if metric != "" && metric != ops.MetricOutputTokS {
		what += " by " + metric
	}
	return chartEntry{name: what, thumbs: []plot.Thumbnailer{glyphThumb(bestGlyph(color.Gray{Y: 96}))}, keep: true}, nil
}

// markPerLoad draws, in the tok/s panel, each per-load point of pts (a
// tune's measured proposal) as a dashed level line across the panel in its
// load's colour, at its tok/s relative to the load's fastest fixed setting,
// and returns its legend entry (none without such points).
func markPerLoad(top *plot.Plot, pts []ops.SweepPoint, scale map[int]float64, colors map[int]color.Color) (chartEntry, error) {
	dashes := []vg.Length{vg.Points(6), vg.Points(4)}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range fixed(pts) {
		lo, hi = min(lo, float64(p.Steps)), max(hi, float64(p.Steps))
	}
	n := 0
	for _, p := range pts {
		clr := colors[p.Concurrency]
		if p.PerLoad == nil || !p.Measured(ops.MetricOutputTokS) || clr == nil || !(scale[p.Concurrency] > 0) || lo > hi {
			continue
		}
		y := 100 * p.OutputTokS / scale[p.Concurrency]
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: y}, {X: hi, Y: y}})
		if err != nil {
			return chartEntry{}, fmt.Errorf("chart the per-load form at concurrency %d: %w", p.Concurrency, err)
		}
		l.LineStyle = draw.LineStyle{Color: clr, Width: vg.Points(chartLineWidth), Dashes: dashes}
		top.Add(l)
		n++
	}
	if n == 0 {
		return chartEntry{}, nil
	}
	mark := draw.LineStyle{Color: color.Gray{Y: 96}, Width: vg.Points(chartLineWidth), Dashes: dashes}
	return chartEntry{name: "per load, as measured (dashed)", thumbs: []plot.Thumbnailer{lineThumb(mark)}, keep: true}, nil
}

// markCurrent draws a dashed vertical line at current.Steps in each panel
// that plots something, and returns the legend entry of the current
// setting (kept however many lines are left out).
func markCurrent(panels [2]*plot.Plot, current ops.Setting, isGrid bool, ring draw.GlyphStyle) (chartEntry, error) {
	label := fmt.Sprintf("now: steps %d", current.Steps)
	if isGrid {
		label += fmt.Sprintf(", topk %d, draft %d", current.TopK, current.DraftTokens)
	}
	dashes := []vg.Length{vg.Points(4), vg.Points(3)}
	for _, p := range panels {
		if p.Y.Max < p.Y.Min {
			continue // nothing plotted
		}
		v, err := plotter.NewLine(plotter.XYs{{X: float64(current.Steps), Y: p.Y.Min}, {X: float64(current.Steps), Y: p.Y.Max}})
		if err != nil {
			return chartEntry{}, fmt.Errorf("chart current steps %d: %w", current.Steps, err)
		}
		v.Color = color.Gray{Y: 96}
		v.Dashes = dashes
		p.Add(v)
	}
	mark := draw.LineStyle{Color: color.Gray{Y: 96}, Width: vg.Points(1), Dashes: dashes}
	return chartEntry{name: label, thumbs: []plot.Thumbnailer{lineThumb(mark), glyphThumb(ring)}, keep: true}, nil
}
