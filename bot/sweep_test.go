package bot

import (
	"bytes"
	"image/png"
	"regexp"
	"strings"
	"testing"

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
	h := newHarness(t, rb, roles)
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

	_, m := result("sweep qwen steps 2,3 at 1,2")
	if m.Image == nil || m.Image.Name != "sweep.png" {
		t.Fatalf("result has no chart: %+v", m.Image)
	}
	img, err := png.Decode(bytes.NewReader(m.Image.PNG))
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != chartWidth || b.Dy() != chartHeight {
		t.Errorf("chart is %dx%d, want %dx%d", b.Dx(), b.Dy(), chartWidth, chartHeight)
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
	b, err := SweepChart(pts, ops.MetricAcceptLen, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("chart: %v", err)
	}
	if _, err := SweepChart([]ops.SweepPoint{{Steps: 3, Error: "x"}}, "", 3); err != nil {
		t.Errorf("a chart of failed points only: %v", err)
	}
}

// mtp tune through the bot: the thread gets the search explained, the table
// and the chart, and the service is left on the best value.
func TestTuneReportOnTheLab(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	_, rb := labRunbook(t)
	h := newHarness(t, rb, roles)
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
	if _, err := SweepChart(pts, "", 3); err != nil {
		t.Fatal(err)
	}
}
