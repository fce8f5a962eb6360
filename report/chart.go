package report

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ChartName is the file name of job jobID's chart, as a chat shows the
// upload and a terminal saves it: "chart-job-7.png".
func ChartName(jobID int64) string { return fmt.Sprintf("chart-job-%d.png", jobID) }

// ChartInfo is what a chart's title names: the service, the job and when it
// ran.
type ChartInfo struct {
	Service string
	JobID   int64
	At      time.Time
}

// Title is the chart's title: "qwen · job #12 · 2026-03-01 10:04 UTC"
// (each part left out when unknown).
func (i ChartInfo) Title() string {
	t := i.Service
	if i.JobID > 0 {
		t += fmt.Sprintf(" · job #%d", i.JobID)
	}
	if !i.At.IsZero() {
		t += " · " + Stamp(i.At)
	}
	return t
}

// ChartWidth and ChartHeight are the chart's size in pixels, drawn at
// chartDPI; the other constants are the chart's parts in points.
const (
	ChartWidth  = 1200
	ChartHeight = 900
	chartDPI    = 96

	chartLineWidth   = 2  // points: thick enough to read, and to sample in tests
	chartMargin      = 8  // points around the panels and the legend
	chartLegendInset = 6  // points between the legend box and its entries
	chartRingRadius  = 7  // points: the ring around the current setting's points
	chartBestRadius  = 6  // points: the square on the best point of a load
	chartTitleSize   = 15 // points: the title's font
)

// chartLayout says where a chart was drawn, in pixels of the PNG (origin top
// left): the title's box and text, each panel's plotted area, the legend's
// box, each line's colour in legend order, the x of the current steps in
// each panel (-1: not marked), the centre of each load's best point in the
// top panel in the order of the loads (the applied result's chart: the
// centre of each load's group on the top panel's axis), and each panel's
// range of figures (Y: min, max).
type chartLayout struct {
	Title    image.Rectangle
	TitleRow string
	Panels   [2]image.Rectangle
	Y        [2][2]float64
	Legend   image.Rectangle
	Colors   []color.Color
	CurrentX [2]int
	Best     []image.Point
}

// currentColor marks the current setting: no line, grid or axis is drawn in
// it inside the panels.
var currentColor = color.RGBA{A: 255}

// renderChart draws title above the panels, the panels one above the
// other, and the legend of entries in a box to their right, and encodes the
// PNG. It records in lay where the title, the panels' plotted areas and the
// legend's box are, and returns each panel's plotted canvas (for the
// caller to place marks in pixels: toPixel).
func renderChart(title string, panels [2]*plot.Plot, entries []chartEntry, lay *chartLayout) ([]byte, [2]draw.Canvas, error) {
	var data [2]draw.Canvas
	img := vgimg.NewWith(vgimg.UseWH(vg.Inch*ChartWidth/chartDPI, vg.Inch*ChartHeight/chartDPI), vgimg.UseDPI(chartDPI))
	dc := draw.New(img)
	margin, inset := vg.Points(chartMargin), vg.Points(chartLegendInset)
	// The title takes a row at the top.
	ts := plot.NewLegend().TextStyle
	ts.Font.Size = vg.Points(chartTitleSize)
	ts.Color = color.Black
	ts.XAlign, ts.YAlign = text.XLeft, text.YTop
	titleH := ts.Height(title) + margin
	if title != "" {
		top := vg.Point{X: dc.Min.X + margin, Y: dc.Max.Y - margin}
		dc.FillText(ts, top, title)
		lay.Title = pixels(vg.Rectangle{Min: vg.Point{X: top.X, Y: top.Y - ts.Height(title)}, Max: vg.Point{X: top.X + ts.Width(title), Y: top.Y}}, dc.Max.Y)
		lay.TitleRow = title
	}
	// The legend's box takes a column at the right, as wide as its longest
	// entry; the panels share the rest, below the title.
	_, w, _ := chartLegend(entries, dc.Size().Y-2*margin-2*inset-titleH)
	box := vg.Rectangle{Min: vg.Point{X: dc.Max.X - margin - w - 2*inset}, Max: vg.Point{X: dc.Max.X - margin}}
	area := dc
	area.Max.X = box.Min.X - margin
	area.Max.Y -= titleH
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: margin, PadY: vg.Points(12), PadTop: margin, PadBottom: margin,
		PadLeft: margin, PadRight: margin}
	cs := plot.Align([][]*plot.Plot{{panels[0]}, {panels[1]}}, tiles, area)
	for i, p := range panels {
		p.Draw(cs[i][0])
		data[i] = p.DataCanvas(cs[i][0])
		lay.Panels[i] = pixels(data[i].Rectangle, dc.Max.Y)
		lay.Y[i] = [2]float64{p.Y.Min, p.Y.Max}
	}
	// The box's top is level with the top panel's plotted area; its
	// entries are those that fit below it.
	top0 := data[0].Max.Y
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
		return nil, data, fmt.Errorf("encode chart: %w", err)
	}
	return buf.Bytes(), data, nil
}

// toPixel is the pixel of the PNG (origin top left) at data point (x, y) of
// panel p drawn on data.
func toPixel(p *plot.Plot, data draw.Canvas, x, y float64) image.Point {
	tx, ty := p.Transforms(&data)
	px := func(v vg.Length) int { return int(math.Round(float64(v * chartDPI / vg.Inch))) }
	return image.Pt(px(tx(x)), px(vg.Inch*ChartHeight/chartDPI-ty(y)))
}

// chartEntry is one entry of a chart's legend.
type chartEntry struct {
	name   string
	thumbs []plot.Thumbnailer
	keep   bool // shown however many lines are left out (the current setting, the best mark)
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

func (t glyphThumb) Thumbnail(c *draw.Canvas) { c.DrawGlyph(draw.GlyphStyle(t), c.Center()) }

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
