package bot

import (
	"bytes"
	"context"
	"fmt"
	"image/color"
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

// Chart size in pixels, drawn at chartDPI.
const (
	chartWidth  = 1200
	chartHeight = 900
	chartDPI    = 96
)

// sweepReport puts a sweep's (or a tune's) report into res: a table per
// concurrency (output tok/s, per-stream tok/s, accept length, acceptance
// rate, TTFT p50/p99), the best point of each by res.Metric marked, each
// point beside its previous result at the same settings and load (rows[i] is
// point i's stored result, zero when it was not stored), and the chart.
// Storing or rendering problems are logged; the job's result stands.
func (e *Engine) sweepReport(ctx context.Context, r *jobRun, res *ops.Result, rows []store.BenchResult) {
	prev := make([]*store.BenchResult, len(res.Points))
	for i, row := range rows {
		if row.ID == 0 {
			continue
		}
		if p, err := e.opts.Store.PreviousAtLoad(ctx, r.job.Service, row.Settings, row.Load(), row.ID); err == nil {
			prev[i] = &p
		}
	}
	var current ops.Setting
	if res.Spec != nil {
		current = ops.Setting{Steps: res.Spec.Steps, TopK: res.Spec.TopK, DraftTokens: res.Spec.DraftTokens}
	}
	res.Details = append(res.Details, SweepTables(res.Points, prev, res.Metric, current)...)
	png, err := SweepChart(res.Points, res.Metric, current.Steps)
	if err != nil {
		e.log.Warn("render sweep chart", "job", r.job.ID, "err", err)
		return
	}
	res.Chart = png
}

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
				was = fmt.Sprintf("%.1f (%s, %s)", prev[i].OutputTokS, pctChange(prev[i].OutputTokS, p.OutputTokS), resultSource(*prev[i]))
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

// SweepChart renders pts as a PNG, in memory: output tok/s (top) and accept
// length (bottom) against steps, one line per concurrency, the current steps
// marked by a dashed vertical line (current 0: none). Failed points are left
// out.
func SweepChart(pts []ops.SweepPoint, metric string, current int) ([]byte, error) {
	type series struct {
		conc, topk, draft int
	}
	var keys []series
	isGrid := grid(pts)
	for _, p := range pts {
		k := series{conc: p.Concurrency}
		if isGrid {
			k.topk, k.draft = p.TopK, p.Setting().DraftTokens
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	top, bottom := plot.New(), plot.New()
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
		p.Legend.Top = true
		p.X.Tick.Marker = integerTicks{}
	}
	for i, k := range keys {
		name := fmt.Sprintf("concurrency %d", k.conc)
		if isGrid {
			name += fmt.Sprintf(", topk %d", k.topk)
			if k.draft > 0 {
				name += fmt.Sprintf(", draft %d", k.draft)
			}
		}
		var tok, acc plotter.XYs
		for _, p := range pts {
			if p.Concurrency == k.conc && (!isGrid || (p.TopK == k.topk && p.Setting().DraftTokens == k.draft)) && p.OK {
				tok = append(tok, plotter.XY{X: float64(p.Steps), Y: p.OutputTokS})
				acc = append(acc, plotter.XY{X: float64(p.Steps), Y: p.AcceptLen})
			}
		}
		if len(tok) == 0 {
			continue
		}
		sortXY(tok)
		sortXY(acc)
		for _, s := range []struct {
			p  *plot.Plot
			xy plotter.XYs
		}{{top, tok}, {bottom, acc}} {
			l, sc, err := plotter.NewLinePoints(s.xy)
			if err != nil {
				return nil, fmt.Errorf("chart %s: %w", name, err)
			}
			l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
			sc.Shape = plotutil.Shape(i)
			s.p.Add(l, sc)
			s.p.Legend.Add(name, l, sc)
		}
	}
	if current > 0 {
		for _, p := range []*plot.Plot{top, bottom} {
			if p.Y.Max < p.Y.Min {
				continue // nothing plotted
			}
			v, err := plotter.NewLine(plotter.XYs{{X: float64(current), Y: p.Y.Min}, {X: float64(current), Y: p.Y.Max}})
			if err != nil {
				return nil, fmt.Errorf("chart current steps %d: %w", current, err)
			}
			v.Color = color.Gray{Y: 96}
			v.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(v)
			p.Legend.Add(fmt.Sprintf("now: steps %d", current), v)
		}
	}
	img := vgimg.NewWith(vgimg.UseWH(vg.Inch*chartWidth/chartDPI, vg.Inch*chartHeight/chartDPI), vgimg.UseDPI(chartDPI))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Points(8), PadY: vg.Points(12), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	cs := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(cs[0][0])
	bottom.Draw(cs[1][0])
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode chart: %w", err)
	}
	return buf.Bytes(), nil
}

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
