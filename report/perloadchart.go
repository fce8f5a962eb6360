package report

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// Colours of the applied result's chart: what ran before, what runs now, and
// the change (a gain, a loss).
var (
	beforeColor = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	afterColor  = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	gainColor   = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	lossColor   = color.RGBA{R: 214, G: 39, B: 40, A: 255}
)

// loadBars is one load of the applied result's chart: its concurrency, the
// tok/s before (prev) and after (the point), each unknown when not measured.
type loadBars struct {
	conc          int
	before, after float64
	beforeFrom    string // the earlier result's job and settings
}

// perLoadBars are the loads of pts (the per-load points, ascending
// concurrency) with prev[i] beside pts[i].
func perLoadBars(pts []ops.SweepPoint, prev []*store.BenchResult) []loadBars {
	var out []loadBars
	for i, p := range pts {
		if p.PerLoad == nil {
			continue
		}
		l := loadBars{conc: p.Concurrency, before: ops.Unknown(), after: ops.Unknown()}
		if p.Measured(ops.MetricOutputTokS) {
			l.after = p.OutputTokS
		}
		if i < len(prev) && prev[i] != nil && ops.Known(prev[i].OutputTokS) {
			l.before, l.beforeFrom = prev[i].OutputTokS, ResultSource(*prev[i])+" at "+prev[i].Settings
		}
		out = append(out, l)
	}
	slices.SortStableFunc(out, func(a, b loadBars) int { return a.conc - b.conc })
	return out
}

// perLoadChart charts an applied per-load form by concurrency (the x axis,
// one group per load): output tok/s before (the last result at that load
// before the job, of any form) and after, side by side (top), and the change
// in percent (bottom, green a gain, red a loss, each written at the top of
// the panel, "nothing to compare" where a load has no figure before or
// after). A figure not measured is no bar (a gap), never a bar at 0. The layout's Best holds the centre of each
// load's group on the top panel's x axis.
func perLoadChart(pts []ops.SweepPoint, prev []*store.BenchResult, info ChartInfo) ([]byte, chartLayout, error) {
	var lay chartLayout
	loads := perLoadBars(pts, prev)
	names := make([]string, len(loads))
	for i, l := range loads {
		names[i] = fmt.Sprintf("concurrency %d", l.conc)
	}
	top, bottom := plot.New(), plot.New()
	top.Title.Text = "output tok/s at each load: before and after (no bar: not measured)"
	top.Y.Label.Text = "tok/s"
	bottom.Title.Text = "change after against before, % (no bar: nothing to compare)"
	bottom.Y.Label.Text = "% change"
	bottom.X.Label.Text = "load"
	w := vg.Points(28)
	for _, p := range []*plot.Plot{top, bottom} {
		p.Add(plotter.NewGrid())
		if len(names) > 0 {
			p.NominalX(names...)
		}
		p.X.Min, p.X.Max = -0.5, float64(len(loads))-0.5
	}
	var notes plotter.XYLabels
	for i, l := range loads {
		if err := addBar(top, i, l.before, -w/2, w, beforeColor); err != nil {
			return nil, lay, err
		}
		if err := addBar(top, i, l.after, w/2, w, afterColor); err != nil {
			return nil, lay, err
		}
		note := "nothing to compare"
		if ops.Known(l.before) && ops.Known(l.after) && l.before > 0 {
			pct := 100 * (l.after/l.before - 1)
			clr := gainColor
			if pct < 0 {
				clr = lossColor
			}
			if err := addBar(bottom, i, pct, 0, w, clr); err != nil {
				return nil, lay, err
			}
			note = fmt.Sprintf("%+.1f%%", pct)
		}
		notes.XYs = append(notes.XYs, plotter.XY{X: float64(i), Y: 0})
		notes.Labels = append(notes.Labels, note)
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.Y.Min, p.Y.Max = min(p.Y.Min, 0), max(p.Y.Max, 0)
		pad := max((p.Y.Max-p.Y.Min)/10, 1)
		p.Y.Max += pad
		if p.Y.Min < 0 {
			p.Y.Min -= pad
		}
	}
	if len(notes.XYs) > 0 {
		// Each change's figure, written at the top of the panel above its load.
		for i := range notes.XYs {
			notes.XYs[i].Y = bottom.Y.Max - (bottom.Y.Max-bottom.Y.Min)/20
		}
		lb, err := plotter.NewLabels(notes)
		if err != nil {
			return nil, lay, fmt.Errorf("chart the changes: %w", err)
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].XAlign = text.XCenter
		}
		bottom.Add(lb)
	}
	entries := []chartEntry{
		{name: "before: the last result at that load before this job", thumbs: []plot.Thumbnailer{boxThumb(beforeColor)}},
		{name: "after: this job, per load", thumbs: []plot.Thumbnailer{boxThumb(afterColor)}},
		{name: "change: a gain", thumbs: []plot.Thumbnailer{boxThumb(gainColor)}},
		{name: "change: a loss", thumbs: []plot.Thumbnailer{boxThumb(lossColor)}},
	}
	lay.Colors = []color.Color{beforeColor, afterColor, gainColor, lossColor}
	lay.CurrentX = [2]int{-1, -1}
	png, data, err := renderChart(info.Title(), [2]*plot.Plot{top, bottom}, entries, &lay)
	if err != nil {
		return nil, lay, err
	}
	for i := range loads {
		lay.Best = append(lay.Best, toPixel(top, data[0], float64(i), top.Y.Min))
	}
	return png, lay, nil
}

// addBar draws one bar of height v at x in clr, offset from x's centre;
// nothing when v is unknown.
func addBar(p *plot.Plot, x int, v float64, offset, w vg.Length, clr color.Color) error {
	if !ops.Known(v) {
		return nil
	}
	b, err := plotter.NewBarChart(plotter.Values{v}, w)
	if err != nil {
		return fmt.Errorf("chart a bar at %d: %w", x, err)
	}
	b.XMin, b.Offset, b.Color = float64(x), offset, clr
	b.LineStyle.Width = 0
	p.Add(b)
	return nil
}

// boxThumb is a legend thumbnail: a square of clr.
type boxThumb color.RGBA

func (t boxThumb) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(color.RGBA(t), []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
}
