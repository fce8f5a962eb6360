package report

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"regexp"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops"
)

// The tables and the chart need nothing but the points: failed points are
// listed with their error and left out of the chart; the metric picks the best.
func TestSweepTablesAndChart(t *testing.T) {
	t.Parallel()
	pts := []ops.SweepPoint{
		{Steps: 2, Concurrency: 1, OK: true, OutputTokS: 250, PerStreamTokS: 250, AcceptLen: 2.8, AcceptRate: 0.9},
		{Steps: 4, Concurrency: 1, OK: true, OutputTokS: 240, PerStreamTokS: 240, AcceptLen: 3.9, AcceptRate: 0.85},
		{Steps: 6, Concurrency: 1, Error: "start failed"},
	}
	tab := strings.Join(SweepTables(pts, nil, ops.MetricAcceptLen, ops.Setting{Steps: 2}), "\n")
	if !regexp.MustCompile(`(?m)^4 .*<- best`).MatchString(tab) || !regexp.MustCompile(`(?m)^2 .*\(now\)`).MatchString(tab) ||
		!strings.Contains(tab, "6      failed: start failed") {
		t.Errorf("table by accept_len:\n%s", tab)
	}
	b, err := SweepChart(pts, nil, ops.MetricAcceptLen, ops.Setting{Steps: 2}, ChartInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("chart: %v", err)
	}
	if _, err := SweepChart([]ops.SweepPoint{{Steps: 3, Error: "x"}}, nil, "", ops.Setting{Steps: 3}, ChartInfo{}); err != nil {
		t.Errorf("a chart of failed points only: %v", err)
	}
}

// Topk and draft columns show when the points vary them.
func TestSweepTablesShowTheGrid(t *testing.T) {
	t.Parallel()
	pts := []ops.SweepPoint{
		{Steps: 3, TopK: 1, DraftTokens: 4, Concurrency: 1, OK: true, OutputTokS: 200},
		{Steps: 3, TopK: 4, DraftTokens: 8, Concurrency: 1, OK: true, OutputTokS: 230},
		{Steps: 3, TopK: 4, DraftTokens: 16, Concurrency: 1, OK: true, OutputTokS: 210},
	}
	tab := strings.Join(SweepTables(pts, nil, "", ops.Setting{Steps: 3, TopK: 1, DraftTokens: 4}), "\n")
	if !strings.Contains(tab, "topk draft") || !regexp.MustCompile(`(?m)^3 +4 +8 .*<- best$`).MatchString(tab) ||
		!regexp.MustCompile(`(?m)^3 +1 +4 .*\(now\)$`).MatchString(tab) {
		t.Errorf("grid table:\n%s", tab)
	}
	if _, err := SweepChart(pts, nil, "", ops.Setting{Steps: 3, TopK: 1, DraftTokens: 4}, ChartInfo{}); err != nil {
		t.Fatal(err)
	}
}

// layoutPoints are a sweep of steps 1..6 at concurrencies 1, 8 and 64 whose
// throughput peaks at 6, 4 and 2 steps (deeper speculation pays at low load).
func layoutPoints() []ops.SweepPoint {
	var pts []ops.SweepPoint
	for i, c := range []int{1, 8, 64} {
		peak := float64(6 - 2*i)
		for s := 1; s <= 6; s++ {
			d := float64(s) - peak
			pts = append(pts, ops.SweepPoint{Steps: s, Concurrency: c, OK: true,
				OutputTokS: float64(300*(i+1)) * (1 - 0.04*d*d), AcceptLen: 1 + 0.5*float64(s) - 0.4*float64(i)})
		}
	}
	return pts
}

// The chart is one PNG of two panels (tok/s above accept length), a line per
// concurrency in each, the current setting marked in each, and the legend in
// a box beside the panels, covering no line: every pixel of a line's colour
// lies in a panel or in the legend box, the box overlaps no panel, and the
// only black inside a panel is the ring around the current setting.
func TestSweepChartLayout(t *testing.T) {
	t.Parallel()
	pts := layoutPoints()
	b, lay, err := sweepChart(pts, "", ops.Setting{Steps: 3, TopK: 1, DraftTokens: 4}, ChartInfo{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Dx() != ChartWidth || bounds.Dy() != ChartHeight {
		t.Fatalf("chart is %dx%d, want %dx%d", bounds.Dx(), bounds.Dy(), ChartWidth, ChartHeight)
	}
	if len(lay.Colors) != 3 {
		t.Fatalf("%d lines, want one per concurrency (3)", len(lay.Colors))
	}
	if lay.Legend.Empty() || !lay.Legend.In(bounds) {
		t.Fatalf("legend box %v is not inside the chart %v", lay.Legend, bounds)
	}
	for i, p := range lay.Panels {
		if p.Dx() < ChartWidth/2 || p.Dy() < ChartHeight/4 {
			t.Errorf("panel %d is %v: too small", i, p)
		}
		if p.Overlaps(lay.Legend) || lay.Legend.Min.X < p.Max.X {
			t.Errorf("legend box %v is not right of panel %d %v", lay.Legend, i, p)
		}
	}
	if lay.Panels[0].Max.Y > lay.Panels[1].Min.Y {
		t.Errorf("panels overlap: %v %v", lay.Panels[0], lay.Panels[1])
	}
	same := func(a, b color.Color) bool {
		r1, g1, b1, a1 := a.RGBA()
		r2, g2, b2, a2 := b.RGBA()
		return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
	}
	for i, clr := range lay.Colors {
		var in [3]int // top panel, bottom panel, legend
		outside := 0
		for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
			for x := bounds.Min.X; x < bounds.Max.X; x++ {
				if !same(img.At(x, y), clr) {
					continue
				}
				pt := image.Pt(x, y)
				switch {
				case pt.In(lay.Panels[0]):
					in[0]++
				case pt.In(lay.Panels[1]):
					in[1]++
				case pt.In(lay.Legend):
					in[2]++
				default:
					outside++
				}
			}
		}
		if in[0] < 50 || in[1] < 50 || in[2] < 10 || outside != 0 {
			t.Errorf("line %d's colour: %d pixels in the tok/s panel, %d in the accept length panel, %d in the legend, %d elsewhere",
				i, in[0], in[1], in[2], outside)
		}
	}
	for i, p := range lay.Panels {
		if lay.CurrentX[i] <= p.Min.X || lay.CurrentX[i] >= p.Max.X {
			t.Fatalf("panel %d: the current steps at x=%d, outside %v", i, lay.CurrentX[i], p)
		}
		near, far := 0, 0
		inner := p.Inset(3)
		for y := inner.Min.Y; y < inner.Max.Y; y++ {
			for x := inner.Min.X; x < inner.Max.X; x++ {
				if !same(img.At(x, y), currentColor) {
					continue
				}
				if d := x - lay.CurrentX[i]; d >= -12 && d <= 12 {
					near++
				} else {
					far++
				}
			}
		}
		if near < 30 || far != 0 {
			t.Errorf("panel %d: %d pixels of the current setting's ring at its steps, %d elsewhere (text or a legend inside the panel?)", i, near, far)
		}
	}
}

// A grid with more lines than the legend holds still charts: the legend
// box stays beside the panels and inside the chart.
func TestSweepChartManyLines(t *testing.T) {
	t.Parallel()
	var pts []ops.SweepPoint
	for _, c := range []int{1, 2, 4, 8, 16, 32, 48, 64} {
		for _, k := range []int{2, 4, 8} {
			for _, d := range []int{8, 16, 32} {
				for s := 2; s <= 3; s++ {
					pts = append(pts, ops.SweepPoint{Steps: s, TopK: k, DraftTokens: d, Concurrency: c, OK: true,
						OutputTokS: float64(c*k + d + s), AcceptLen: float64(s)})
				}
			}
		}
	}
	_, lay, err := sweepChart(pts, "", ops.Setting{Steps: 3, TopK: 4, DraftTokens: 16}, ChartInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lay.Colors) != 72 || !lay.Legend.In(image.Rect(0, 0, ChartWidth, ChartHeight)) || lay.Legend.Overlaps(lay.Panels[0]) {
		t.Errorf("%d lines, legend %v, top panel %v", len(lay.Colors), lay.Legend, lay.Panels[0])
	}
}

// BenchmarkSweepChart renders the chart of a sweep of 6 steps values at 3
// concurrencies: once per sweep, after its last benchmark.
func BenchmarkSweepChart(b *testing.B) {
	var pts []ops.SweepPoint
	for i, c := range []int{1, 8, 64} {
		for s := 1; s <= 6; s++ {
			pts = append(pts, ops.SweepPoint{Steps: s, Concurrency: c, OK: true,
				OutputTokS: float64(300*(i+1)) * (1 + 0.1*float64(s)), AcceptLen: 1 + 0.5*float64(s)})
		}
	}
	for b.Loop() {
		if _, err := SweepChart(pts, nil, "", ops.Setting{Steps: 3}, ChartInfo{}); err != nil {
			b.Fatal(err)
		}
	}
}
