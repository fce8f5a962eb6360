package report

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

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
	return p.Steps == cur.Steps && (p.TopK == 0 || cur.TopK == 0 || p.TopK == cur.TopK) &&
		(p.DraftTokens == 0 || cur.DraftTokens == 0 || p.DraftTokens == cur.DraftTokens)
}

// SweepTables renders one table per concurrency of pts: per setting its
// figures, the best by metric marked, the current setting marked, and beside
// each its previous result (prev[i] for pts[i], nil when none). Topk and
// draft token columns show when the points vary them.
func SweepTables(pts []ops.SweepPoint, prev []*store.BenchResult, metric string, current ops.Setting) []string {
	if metric == "" {
		metric = ops.MetricOutputTokS
	}
	var out []string
	for _, c := range concurrencies(pts) {
		best := ops.BestAt(pts, c, metric)
		var b strings.Builder
		fmt.Fprintf(&b, "concurrency %d (best by %s):\n", c, metric)
		label := func(p ops.SweepPoint) string { return fmt.Sprintf("%-6d", p.Steps) }
		head := fmt.Sprintf("%-6s", "steps")
		if grid(pts) {
			label = func(p ops.SweepPoint) string { return fmt.Sprintf("%-6d %4d %5d", p.Steps, p.TopK, p.DraftTokens) }
			head = fmt.Sprintf("%-6s %4s %5s", "steps", "topk", "draft")
		}
		fmt.Fprintf(&b, "%s %9s %10s %10s %7s %9s %9s  %s\n", head, "tok/s", "per-stream", "accept len", "accept", "TTFT p50", "TTFT p99", "previous")
		for i, p := range pts {
			if p.Concurrency != c {
				continue
			}
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
			var ttft50, ttft99 float64
			if p.Bench != nil {
				ttft50, ttft99 = p.Bench.TTFT.P50, p.Bench.TTFT.P99
			}
			was := "none at this load"
			if i < len(prev) && prev[i] != nil {
				was = fmt.Sprintf("%.1f (%s, %s)", prev[i].OutputTokS, pctChange(prev[i].OutputTokS, p.OutputTokS), ResultSource(*prev[i]))
			}
			fmt.Fprintf(&b, "%s %9.1f %10.1f %10.2f %6.0f%% %6.0f ms %6.0f ms  %s%s\n",
				label(p), p.OutputTokS, p.PerStreamTokS, p.AcceptLen, p.AcceptRate*100, ttft50, ttft99, was, mark)
		}
		out = append(out, strings.TrimRight(b.String(), "\n"))
	}
	return out
}

func pctChange(a, b float64) string {
	if a == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", (b-a)/a*100)
}

// ChartName is the file name of job jobID's chart, as a chat shows the
// upload and a terminal saves it: "chart-job-7.png".
func ChartName(jobID int64) string { return fmt.Sprintf("chart-job-%d.png", jobID) }

// SweepChart renders pts as one PNG, in memory: a panel per figure, output
// tok/s (top) and accept length (bottom) against steps, a line per
// concurrency (per concurrency, topk and draft tokens when the points vary
// them), the current setting marked (a dashed vertical line at its steps and
// a ring around its points; current.Steps 0: none), and the legend in a box
// to the right of the panels, where it covers no line. Failed points are left
// out.
func SweepChart(pts []ops.SweepPoint, metric string, current ops.Setting) ([]byte, error) {
	b, _, err := sweepChart(pts, metric, current)
	return b, err
}

// ChartWidth and ChartHeight are the chart's size in pixels, drawn at
// chartDPI; the other constants are the chart's parts in points.
const (
	ChartWidth  = 1200
	ChartHeight = 900
	chartDPI    = 96

	chartLineWidth   = 2 // points: thick enough to read, and to sample in tests
	chartMargin      = 8 // points around the panels and the legend
	chartLegendInset = 6 // points between the legend box and its entries
	chartRingRadius  = 7 // points: the ring around the current setting's points
)

// chartLayout says where sweepChart drew, in pixels of the PNG (origin top
// left): each panel's plotted area (tok/s, accept length), the legend's box,
// each line's colour in legend order, and the x of the current steps in each
// panel (-1: not marked).
type chartLayout struct {
	Panels   [2]image.Rectangle
	Legend   image.Rectangle
	Colors   []color.Color
	CurrentX [2]int
}

// currentColor marks the current setting: no line, grid or axis is drawn in
// it inside the panels.
var currentColor = color.RGBA{A: 255}

// sweepChart is SweepChart, also saying where it drew (for the tests).
func sweepChart(pts []ops.SweepPoint, metric string, current ops.Setting) ([]byte, chartLayout, error) {
	var lay chartLayout
	isGrid := grid(pts)
	top, bottom := chartPanels(metric)
	panels := [2]*plot.Plot{top, bottom}
	ring := draw.GlyphStyle{Color: currentColor, Radius: vg.Points(chartRingRadius), Shape: thickRing{}}
	var entries []chartEntry
	for i, k := range chartSeriesOf(pts, isGrid) {
		xy, now := k.points(pts, isGrid, current)
		if len(xy[0]) == 0 {
			continue
		}
		clr := plotutil.Color(len(lay.Colors))
		lay.Colors = append(lay.Colors, clr)
		e, err := addSeries(panels, k.name(isGrid), xy, now, clr, i, ring)
		if err != nil {
			return nil, lay, err
		}
		entries = append(entries, e)
	}
	lay.CurrentX = [2]int{-1, -1}
	if current.Steps > 0 {
		e, err := markCurrent(panels, current, isGrid, ring)
		if err != nil {
			return nil, lay, err
		}
		entries = append(entries, e)
	}
	png, err := renderChart(panels, entries, current, &lay)
	return png, lay, err
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

// name is k's legend entry: "concurrency 8", with ", topk 2, draft 6" in a
// grid (draft when known).
func (k chartSeries) name(isGrid bool) string {
	name := fmt.Sprintf("concurrency %d", k.conc)
	if isGrid {
		name += fmt.Sprintf(", topk %d", k.topk)
		if k.draft > 0 {
			name += fmt.Sprintf(", draft %d", k.draft)
		}
	}
	return name
}

// points are k's points that served, by steps, in each panel (tok/s, then
// accept length), sorted by steps; and among them, in the order of pts,
// those that run current (current.Steps 0: none).
func (k chartSeries) points(pts []ops.SweepPoint, isGrid bool, current ops.Setting) (xy, now [2]plotter.XYs) {
	for _, p := range pts {
		if p.Concurrency == k.conc && (!isGrid || (p.TopK == k.topk && p.Setting().DraftTokens == k.draft)) && p.OK {
			tok := plotter.XY{X: float64(p.Steps), Y: p.OutputTokS}
			acc := plotter.XY{X: float64(p.Steps), Y: p.AcceptLen}
			xy[0], xy[1] = append(xy[0], tok), append(xy[1], acc)
			if current.Steps > 0 && sameSetting(p, current) {
				now[0], now[1] = append(now[0], tok), append(now[1], acc)
			}
		}
	}
	sortXY(xy[0])
	sortXY(xy[1])
	return xy, now
}

// chartPanels are the chart's two panels, titled and labelled, with a grid
// and a tick at every whole steps value: output tok/s (top; the title names
// metric when the best is chosen by another) and accept length (bottom).
func chartPanels(metric string) (top, bottom *plot.Plot) {
	top, bottom = plot.New(), plot.New()
	top.Title.Text = "output tok/s by steps"
	if metric != "" && metric != ops.MetricOutputTokS {
		top.Title.Text += " (best chosen by " + metric + ")"
	}
	top.Y.Label.Text = "tok/s"
	bottom.Title.Text = "accept length by steps"
	bottom.X.Label.Text = "speculative steps"
	bottom.Y.Label.Text = "accept length"
	for _, p := range []*plot.Plot{top, bottom} {
		p.Add(plotter.NewGrid())
		p.X.Tick.Marker = integerTicks{}
	}
	return top, bottom
}

// addSeries draws a series in each panel: its points xy[j] as a line with
// glyphs of shape in clr, and a ring around the current setting's now[j].
// It returns the series' legend entry.
func addSeries(panels [2]*plot.Plot, name string, xy, now [2]plotter.XYs, clr color.Color, shape int, ring draw.GlyphStyle) (chartEntry, error) {
	var thumbs []plot.Thumbnailer
	for j := range panels {
		l, sc, err := plotter.NewLinePoints(xy[j])
		if err != nil {
			return chartEntry{}, fmt.Errorf("chart %s: %w", name, err)
		}
		l.Color, sc.Color = clr, clr
		l.Width = vg.Points(chartLineWidth)
		sc.Shape = plotutil.Shape(shape)
		panels[j].Add(l, sc)
		if len(now[j]) > 0 {
			r, err := plotter.NewScatter(now[j])
			if err != nil {
				return chartEntry{}, fmt.Errorf("chart the current setting: %w", err)
			}
			r.GlyphStyle = ring
			panels[j].Add(r)
		}
		thumbs = []plot.Thumbnailer{l, sc}
	}
	return chartEntry{name: name, thumbs: thumbs}, nil
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

// renderChart draws the panels, one above the other, and the legend of
// entries in a box to their right, and encodes the PNG. It records in lay
// where the panels' plotted areas and the legend's box are, and the x of
// current.Steps in each panel that plots something (current.Steps 0: none).
func renderChart(panels [2]*plot.Plot, entries []chartEntry, current ops.Setting, lay *chartLayout) ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(vg.Inch*ChartWidth/chartDPI, vg.Inch*ChartHeight/chartDPI), vgimg.UseDPI(chartDPI))
	dc := draw.New(img)
	// The legend's box takes a column at the right, as wide as its longest
	// entry; the panels share the rest.
	margin, inset := vg.Points(chartMargin), vg.Points(chartLegendInset)
	_, w, _ := chartLegend(entries, dc.Size().Y-2*margin-2*inset)
	box := vg.Rectangle{Min: vg.Point{X: dc.Max.X - margin - w - 2*inset}, Max: vg.Point{X: dc.Max.X - margin}}
	area := dc
	area.Max.X = box.Min.X - margin
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: margin, PadY: vg.Points(12), PadTop: margin, PadBottom: margin,
		PadLeft: margin, PadRight: margin}
	cs := plot.Align([][]*plot.Plot{{panels[0]}, {panels[1]}}, tiles, area)
	for i, p := range panels {
		p.Draw(cs[i][0])
		data := p.DataCanvas(cs[i][0])
		lay.Panels[i] = pixels(data.Rectangle, dc.Max.Y)
		if current.Steps > 0 && p.Y.Max >= p.Y.Min {
			x, _ := p.Transforms(&data)
			lay.CurrentX[i] = int(math.Round(float64(x(float64(current.Steps)) * chartDPI / vg.Inch)))
		}
	}
	// The box's top is level with the top panel's plotted area; its
	// entries are those that fit below it.
	top0 := panels[0].DataCanvas(cs[0][0]).Max.Y
	legend, _, h := chartLegend(entries, top0-dc.Min.Y-margin-2*inset)
	box.Max.Y, box.Min.Y = top0, top0-h-2*inset
	if len(entries) > 0 {
		dc.FillPolygon(color.White, boxCorners(box))
		dc.StrokeLines(draw.LineStyle{Color: color.Gray{Y: 160}, Width: vg.Points(1)}, append(boxCorners(box), box.Min))
		legend.Draw(draw.Canvas{Canvas: img, Rectangle: vg.Rectangle{Min: box.Min.Add(vg.Point{X: inset, Y: inset}),
			Max: box.Max.Sub(vg.Point{X: inset, Y: inset})}})
		lay.Legend = pixels(box, dc.Max.Y)
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode chart: %w", err)
	}
	return buf.Bytes(), nil
}

// chartEntry is one entry of a chart's legend.
type chartEntry struct {
	name   string
	thumbs []plot.Thumbnailer
	keep   bool // shown however many lines are left out (the current setting)
}

// chartLegend returns the legend of entries (its text style and spacing)
// and its width and height in points, leaving out the last lines that do
// not fit in height (entries with keep stay): one entry says how many it
// leaves out (the tables list every point).
func chartLegend(entries []chartEntry, height vg.Length) (l plot.Legend, w, h vg.Length) {
	l = plot.NewLegend()
	l.Left, l.Top = true, true
	l.Padding = vg.Points(3)
	l.ThumbnailWidth = vg.Points(24)
	size := func(es []chartEntry) (w, h vg.Length) {
		var eh vg.Length
		for _, e := range es {
			w = max(w, l.ThumbnailWidth+l.TextStyle.Rectangle(" "+e.name).Max.X)
			eh = max(eh, l.TextStyle.Rectangle(e.name).Max.Y)
		}
		if len(es) == 0 {
			return 0, 0
		}
		return w, vg.Length(len(es))*eh + vg.Length(len(es)-1)*l.Padding + l.TextStyle.FontExtents().Descent
	}
	var lines, kept []chartEntry
	for _, e := range entries {
		if e.keep {
			kept = append(kept, e)
		} else {
			lines = append(lines, e)
		}
	}
	shown := entries
	w, h = size(shown)
	for n := len(lines) - 1; h > height && n > 0; n-- {
		shown = append(slices.Clip(lines[:n-1]), chartEntry{name: fmt.Sprintf("… %d more (in the tables)", len(lines)-n+1)})
		shown = append(shown, kept...)
		w, h = size(shown)
	}
	for _, e := range shown {
		l.Add(e.name, e.thumbs...)
	}
	return l, w, h
}

// pixels converts r, in points with the origin at the bottom left of a
// canvas height points high, to pixels of the PNG (origin top left).
func pixels(r vg.Rectangle, height vg.Length) image.Rectangle {
	px := func(v vg.Length) float64 { return float64(v * chartDPI / vg.Inch) }
	return image.Rect(int(math.Floor(px(r.Min.X))), int(math.Floor(px(height-r.Max.Y))),
		int(math.Ceil(px(r.Max.X))), int(math.Ceil(px(height-r.Min.Y))))
}

// boxCorners are r's corners, counter-clockwise from its bottom left.
func boxCorners(r vg.Rectangle) []vg.Point {
	return []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}}
}

// lineThumb and glyphThumb draw a line style and a glyph style as legend
// thumbnails.
type lineThumb draw.LineStyle

func (t lineThumb) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(draw.LineStyle(t), c.Min.X, y, c.Max.X, y)
}

type glyphThumb draw.GlyphStyle

// thickRing is a circle's outline as thick as the chart's lines.
type thickRing struct{}

func (thickRing) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(chartLineWidth)})
	var p vg.Path
	p.Move(vg.Point{X: pt.X + sty.Radius, Y: pt.Y})
	p.Arc(pt, sty.Radius, 0, 2*math.Pi)
	p.Close()
	c.Stroke(p)
}

func (t glyphThumb) Thumbnail(c *draw.Canvas) { c.DrawGlyph(draw.GlyphStyle(t), c.Center()) }

func sortXY(xy plotter.XYs) {
	slices.SortFunc(xy, func(a, b plotter.XY) int {
		switch {
		case a.X < b.X:
			return -1
		case a.X > b.X:
			return 1
		}
		return 0
	})
}

// integerTicks marks every whole steps value (every second one past 20).
type integerTicks struct{}

func (integerTicks) Ticks(min, max float64) []plot.Tick {
	step := 1
	if max-min > 20 {
		step = 2
	}
	var ts []plot.Tick
	for v := int(min); float64(v) <= max; v += step {
		if float64(v) >= min {
			ts = append(ts, plot.Tick{Value: float64(v), Label: fmt.Sprint(v)})
		}
	}
	return ts
}
