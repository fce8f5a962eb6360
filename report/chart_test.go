package report

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/bench"
	"github.com/opsbot/opsbot/store"
)

// decodeChart decodes a chart's PNG.
func decodeChart(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	return img
}

// sameColor reports whether a and b are the same colour.
func sameColor(a, b color.Color) bool {
	r1, g1, b1, a1 := a.RGBA()
	r2, g2, b2, a2 := b.RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
}

// count is how many pixels of r in img are clr.
func count(img image.Image, r image.Rectangle, clr color.Color) int {
	n := 0
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if sameColor(img.At(x, y), clr) {
				n++
			}
		}
	}
	return n
}

var chartInfo = ChartInfo{Service: "qwen", JobID: 12, At: time.Date(2026, 3, 1, 10, 4, 0, 0, time.UTC)}

// A sweep's chart names the service, the job and the date in a title above
// the panels.
func TestChartTitle(t *testing.T) {
	t.Parallel()
	b, lay, err := sweepChart(layoutPoints(), "", ops.Setting{}, chartInfo)
	if err != nil {
		t.Fatal(err)
	}
	img := decodeChart(t, b)
	if lay.TitleRow != "qwen · job #12 · 2026-03-01 10:04 UTC" {
		t.Errorf("title %q", lay.TitleRow)
	}
	if lay.Title.Empty() || lay.Title.Max.Y > lay.Panels[0].Min.Y || count(img, lay.Title, color.Black) < 100 {
		t.Errorf("title box %v (above the top panel %v?) holds %d black pixels", lay.Title, lay.Panels[0], count(img, lay.Title, color.Black))
	}
}

// Each load is on its own scale in the tok/s panel (% of its fastest), so a
// gain at concurrency 1 reads as well as one at 64: every load's best point
// sits at 100%, the same height, at its own steps, marked by a square in
// its line's colour.
func TestSweepChartEachLoadOnItsOwnScale(t *testing.T) {
	t.Parallel()
	pts := layoutPoints() // 300, 600 and 900 tok/s at best: one shared axis would flatten concurrency 1
	b, lay, err := sweepChart(pts, "", ops.Setting{}, chartInfo)
	if err != nil {
		t.Fatal(err)
	}
	img := decodeChart(t, b)
	if len(lay.Best) != 3 {
		t.Fatalf("%d best points marked, want one per load (3)", len(lay.Best))
	}
	xs := map[int]bool{}
	for i, p := range lay.Best {
		if d := p.Y - lay.Best[0].Y; d < -1 || d > 1 {
			t.Errorf("load %d's best is at y=%d, load 0's at y=%d: not on one scale", i, p.Y, lay.Best[0].Y)
		}
		xs[p.X] = true
		box := image.Rect(p.X-4, p.Y-4, p.X+5, p.Y+5)
		if n := count(img, box, lay.Colors[i]); n < 40 {
			t.Errorf("load %d's best point at %v: %d pixels of its colour, want a filled square", i, p, n)
		}
	}
	if len(xs) != 3 {
		t.Errorf("best points at %v: want each at its own steps (6, 4, 2)", lay.Best)
	}
	if lay.Y[0][1] < 100 || lay.Y[0][1] > 110 {
		t.Errorf("tok/s panel's range %v: want relative figures up to 100%%", lay.Y[0])
	}
}

// A point that measured no accept length (the run was shorter than one
// decode-log window) is a gap in the accept length line, never a point at
// 0: the line breaks there and the panel's range stays where the figures
// are.
func TestSweepChartGapsForUnmeasured(t *testing.T) {
	t.Parallel()
	var pts []ops.SweepPoint
	for s := 1; s <= 6; s++ {
		p := ops.SweepPoint{Steps: s, Concurrency: 32, OK: true, OutputTokS: 1000 + 10*float64(s), AcceptLen: 1.5 + 0.3*float64(s), AcceptRate: 0.8}
		if s == 3 || s == 4 {
			p.AcceptLen, p.AcceptRate = math.NaN(), math.NaN()
			p.Bench = &bench.Result{AcceptCause: bench.CauseShortRun, AcceptUnknown: "the run was shorter than one decode-log window (40 decode iterations)"}
		}
		pts = append(pts, p)
	}
	k := chartSeries{conc: 32}
	s := k.points(pts, false, ops.Setting{}, 1060)
	if len(s.xy[1]) != 4 || len(s.segs[1]) != 2 || len(s.segs[1][0]) != 2 || len(s.segs[1][1]) != 2 {
		t.Errorf("accept length: %d points in %d lines %v, want 4 points in 2 lines (a gap at steps 3 and 4)", len(s.xy[1]), len(s.segs[1]), s.segs[1])
	}
	if len(s.xy[0]) != 6 || len(s.segs[0]) != 1 {
		t.Errorf("tok/s: %d points in %d lines, want 6 in one", len(s.xy[0]), len(s.segs[0]))
	}
	_, lay, err := sweepChart(pts, "", ops.Setting{}, chartInfo)
	if err != nil {
		t.Fatal(err)
	}
	if lay.Y[1][0] < 1.5 {
		t.Errorf("accept length panel from %.2f: an unmeasured point was plotted low (0?)", lay.Y[1][0])
	}
}

// An applied per-load form is charted by load: before and after at each
// concurrency (the x axis), the change below; no bar where nothing was
// measured before.
func TestPerLoadChartBeforeAndAfter(t *testing.T) {
	t.Parallel()
	var pts []ops.SweepPoint
	var prev []*store.BenchResult
	for i, c := range []int{1, 8, 32} {
		pts = append(pts, ops.SweepPoint{Steps: 11, Concurrency: c, OK: true, OutputTokS: float64(300 * (i + 1)),
			PerLoad: &ops.PointPerLoad{Among: []int{11, 10}}})
		var p *store.BenchResult
		if c != 8 {
			p = &store.BenchResult{JobID: 7, Settings: "steps=3,topk=1,draft=4", OutputTokS: float64(250 * (i + 1))}
		}
		prev = append(prev, p)
	}
	b, err := SweepChart(pts, prev, "", ops.Setting{}, chartInfo)
	if err != nil {
		t.Fatal(err)
	}
	img := decodeChart(t, b)
	_, lay, err := perLoadChart(pts, prev, chartInfo)
	if err != nil {
		t.Fatal(err)
	}
	if lay.TitleRow != chartInfo.Title() || len(lay.Best) != 3 {
		t.Fatalf("title %q, %d groups; want one group per load (3)", lay.TitleRow, len(lay.Best))
	}
	for i, g := range lay.Best {
		column := image.Rect(g.X-40, lay.Panels[0].Min.Y, g.X+40, lay.Panels[0].Max.Y)
		before, after := count(img, column, beforeColor), count(img, column, afterColor)
		change := count(img, image.Rect(g.X-40, lay.Panels[1].Min.Y, g.X+40, lay.Panels[1].Max.Y), gainColor)
		if after < 100 {
			t.Errorf("load %d: %d pixels of the after bar", i, after)
		}
		if wantBefore := i != 1; (before > 0) != wantBefore || (change > 0) != wantBefore {
			t.Errorf("load %d: %d pixels of before, %d of the change; want them only where a result before exists", i, before, change)
		}
	}
	if !slices.IsSortedFunc(lay.Best, func(a, b image.Point) int { return a.X - b.X }) {
		t.Errorf("groups %v: want the concurrencies left to right", lay.Best)
	}
}
