package bot

import (
	"bytes"
	"fmt"
	"image/png"
	"regexp"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"

	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// A sweep on the lab through the bot posts one report: a table per
// concurrency with the best point and the current setting marked, each point
// beside its previous result, and a PNG chart attached to the job's thread.
func TestSweepReportWithChartOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	_, rb := labRunbook(t)
	h := newHarness(t, jobs.RunbookBackend(rb), roles)
	result := func(cmd string) (store.Job, Message) {
		t.Helper()
		j := h.wait(h.handle("olga", cmd).JobID)
		if j.Status != store.Succeeded {
			t.Fatalf("%s: %s %s", cmd, j.Status, j.Error)
		}
		_, replies := h.chat.Thread(j.Thread)
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
	if m.Image == nil || m.Image.Name != report.ChartName(j1.ID) || m.Image.Name != fmt.Sprintf("chart-job-%d.png", j1.ID) {
		t.Fatalf("result has no chart: %+v", m.Image)
	}
	img, err := png.Decode(bytes.NewReader(m.Image.PNG))
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != report.ChartWidth || b.Dy() != report.ChartHeight {
		t.Errorf("chart is %dx%d, want %dx%d", b.Dx(), b.Dy(), report.ChartWidth, report.ChartHeight)
	}
	// A line per concurrency (1 and 2), in the chart's first two colours.
	for i := range 2 {
		r0, g0, b0, _ := plotutil.Color(i).RGBA()
		n := 0
		for y := range report.ChartHeight {
			for x := range report.ChartWidth {
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

// mtp tune through the bot: the thread gets the search explained, the table
// and the chart, and the service is left on the best value.
func TestTuneReportOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	_, rb := labRunbook(t)
	h := newHarness(t, jobs.RunbookBackend(rb), roles)
	j := h.wait(h.handle("olga", "mtp tune qwen 2..6 at 1").JobID)
	if j.Status != store.Succeeded {
		t.Fatalf("tune: %s %s", j.Status, j.Error)
	}
	_, replies := h.chat.Thread(j.Thread)
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
