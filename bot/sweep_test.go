package bot

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"regexp"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"

	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// A sweep on the lab through the bot posts one report: a table per
// concurrency with the best point and the current setting marked, each point
// beside its previous result, and a PNG chart attached to the job's thread.
func TestSweepReportWithChartOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	_, rb := labRunbook(t)
	h := newHarness(t, RunbookBackend(rb), roles)
	result := func(cmd string) (store.Job, Message) {
		t.Helper()
		j := h.wait(h.handle("olga", cmd).JobID)
		if j.Status != store.Succeeded {
			t.Fatalf("%s: %s %s", cmd, j.Status, j.Error)
		}
		_, replies := h.chat.thread(j.Thread)
		var res []Message
		for _, m := range replies {
			if m.Kind == KindResult {
				res = append(res, m)
			}
		}
		if len(res) != 1 {
			t.Fatalf("%s: %d result messages, want 1", cmd, len(res))
		}
		return j, res[0]
	}

	j1, m := result("sweep qwen steps 2,3 at 1,2")
	if m.Image == nil || m.Image.Name != ChartName(j1.ID) || m.Image.Name != fmt.Sprintf("chart-job-%d.png", j1.ID) {
		t.Fatalf("result has no chart: %+v", m.Image)
	}
	img, err := png.Decode(bytes.NewReader(m.Image.PNG))
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != chartWidth || b.Dy() != chartHeight {
		t.Errorf("chart is %dx%d, want %dx%d", b.Dx(), b.Dy(), chartWidth, chartHeight)
	}
	// A line per concurrency (1 and 2), in the chart's first two colours.
	for i := range 2 {
		r0, g0, b0, _ := plotutil.Color(i).RGBA()
		n := 0
		for y := range chartHeight {
			for x := range chartWidth {
				if r, g, b, _ := img.At(x, y).RGBA(); r == r0 && g == g0 && b == b0 {
					n++
				}
			}
		}
		if n < 200 {
			t.Errorf("line %d: %d pixels of its colour, want a line in each panel and its legend entry", i, n)
		}
	}
	for _, want := range []string{"concurrency 1 (best by output_tok_s):", "concurrency 2 (best by output_tok_s):",
		"TTFT p50", "<- best", "(now)", "none at this load"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("report lacks %q:\n%s", want, m.Text)
		}
	}
	if n := strings.Count(m.Text, "<- best"); n != 2 {
		t.Errorf("%d best marks, want one per concurrency:\n%s", n, m.Text)
	}

	j, m := result("sweep qwen steps 3,6")
	// steps 3 at the configured concurrency (2) ran in the first sweep: it
	// stands beside that result, with its change; steps 6 has none.
	if !regexp.MustCompile(`(?m)^3 .* [0-9.]+ \([+-][0-9.]+%, #1\)`).MatchString(m.Text) {
		t.Errorf("steps 3 is not beside its previous result of job #1:\n%s", m.Text)
	}
	if !regexp.MustCompile(`(?m)^6 .* none at this load`).MatchString(m.Text) {
		t.Errorf("steps 6 should have no previous result:\n%s", m.Text)
	}
	if j.Status != store.Succeeded {
		t.Fatal(j.Error)
	}
}

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
	b, err := SweepChart(pts, ops.MetricAcceptLen, ops.Setting{Steps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("chart: %v", err)
	}
	if _, err := SweepChart([]ops.SweepPoint{{Steps: 3, Error: "x"}}, "", ops.Setting{Steps: 3}); err != nil {
		t.Errorf("a chart of failed points only: %v", err)
	}
}

// mtp tune through the bot: the thread gets the search explained, the table
// and the chart, and the service is left on the best value.
func TestTuneReportOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	_, rb := labRunbook(t)
	h := newHarness(t, RunbookBackend(rb), roles)
	j := h.wait(h.handle("olga", "mtp tune qwen 2..6 at 1").JobID)
	if j.Status != store.Succeeded {
		t.Fatalf("tune: %s %s", j.Status, j.Error)
	}
	_, replies := h.chat.thread(j.Thread)
	var m *Message
	for i := range replies {
		if replies[i].Kind == KindResult {
			m = &replies[i]
		}
	}
	if m == nil || m.Image == nil {
		t.Fatalf("no result with a chart: %+v", replies)
	}
	if _, err := png.Decode(bytes.NewReader(m.Image.PNG)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"→ search", "stopped: ", "applied", "<- best  (now)", "concurrency 1 (best by output_tok_s)"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("tune report lacks %q:\n%s", want, m.Text)
		}
	}
	if strings.Contains(m.Text, "topk") {
		t.Errorf("a steps-only search shows topk and draft columns:\n%s", m.Text)
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
	if _, err := SweepChart(pts, "", ops.Setting{Steps: 3, TopK: 1, DraftTokens: 4}); err != nil {
		t.Fatal(err)
	}
}

// The chart is one PNG of two panels (tok/s above accept length), a line per
// concurrency in each, the current setting marked in each, and the legend in
// a box beside the panels, covering no line: every pixel of a line's colour
// lies in a panel or in the legend box, the box overlaps no panel, and the
// only black inside a panel is the ring around the current setting.
func TestSweepChartLayout(t *testing.T) {
	t.Parallel()
	var pts []ops.SweepPoint
	for i, c := range []int{1, 8, 64} {
		for s := 1; s <= 6; s++ {
			pts = append(pts, ops.SweepPoint{Steps: s, Concurrency: c, OK: true,
				OutputTokS: float64(300*(i+1)) * (1 + 0.1*float64(s)), AcceptLen: 1 + 0.5*float64(s) - 0.4*float64(i)})
		}
	}
	b, lay, err := sweepChart(pts, "", ops.Setting{Steps: 3, TopK: 1, DraftTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Dx() != chartWidth || bounds.Dy() != chartHeight {
		t.Fatalf("chart is %dx%d, want %dx%d", bounds.Dx(), bounds.Dy(), chartWidth, chartHeight)
	}
	if len(lay.Colors) != 3 {
		t.Fatalf("%d lines, want one per concurrency (3)", len(lay.Colors))
	}
	if lay.Legend.Empty() || !lay.Legend.In(bounds) {
		t.Fatalf("legend box %v is not inside the chart %v", lay.Legend, bounds)
	}
	for i, p := range lay.Panels {
		if p.Dx() < chartWidth/2 || p.Dy() < chartHeight/4 {
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
	_, lay, err := sweepChart(pts, "", ops.Setting{Steps: 3, TopK: 4, DraftTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	if len(lay.Colors) != 72 || !lay.Legend.In(image.Rect(0, 0, chartWidth, chartHeight)) || lay.Legend.Overlaps(lay.Panels[0]) {
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
		if _, err := SweepChart(pts, "", ops.Setting{Steps: 3}); err != nil {
			b.Fatal(err)
		}
	}
}
