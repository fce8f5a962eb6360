package ops

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// A row of a tune's proposal that measured no accept length shows "—" for
// it and its rate (with where to read why), never "0.00 0%", and its JSON
// holds null for them.
func TestPerLoadReportShowsUnknownAsDash(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	pl := &PerLoad{Engine: "sglang", Single: 3, Rows: []PerLoadRow{
		{Concurrency: 1, Steps: 9, Candidates: []int{9}, OutputTokS: f(270.7), AcceptLen: 5.2, AcceptRate: 0.47, StepsTokS: 268.1, SingleTokS: f(223.4), GainPct: f(21.2)},
		{Concurrency: 32, Steps: 9, Candidates: []int{9}, OutputTokS: f(3105.1), AcceptLen: math.NaN(), AcceptRate: math.NaN(), StepsTokS: 3101.5, SingleTokS: f(2720.2), GainPct: f(14.1)},
		// An accept length of 1 with the drafts per step unknown (a slot of one value > 0): the rate stays unknown.
		{Concurrency: 48, Steps: 8, Candidates: []int{8}, OutputTokS: f(938.7), AcceptLen: 1, AcceptRate: math.NaN(), StepsTokS: 935.1, SingleTokS: f(763.2), GainPct: f(23)},
	}}
	tab := pl.Report()[0]
	if strings.Contains(tab, "0.00") || strings.Contains(tab, " 0%") || strings.Contains(tab, "NaN") {
		t.Errorf("an unmeasured figure shows as a number:\n%s", tab)
	}
	row := strings.Fields(strings.Split(tab, "\n")[2]) // concurrency, steps, tok/s, accept len, rate, ...
	if len(row) < 5 || row[2] != "3105.1" || row[3] != "—" || row[4] != "—" {
		t.Errorf("concurrency 32 does not show — for its accept length and rate:\n%s", tab)
	}
	b, err := json.Marshal(pl)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if r := back.Rows[1]; r["accept_len"] != nil || r["accept_rate"] != nil || r["output_tok_s"] != 3105.1 {
		t.Errorf("row JSON %v: want null accept_len and accept_rate", r)
	}
	var again PerLoad
	if err := json.Unmarshal(b, &again); err != nil || !math.IsNaN(again.Rows[1].AcceptLen) || again.Rows[0].AcceptLen != 5.2 {
		t.Errorf("read back %+v (%v)", again.Rows, err)
	}
}

// A point's figures it did not measure are null in the result's JSON (the
// "points" of `opsbot run --json`), never 0, and read back as unknown; a
// failed point measured nothing.
func TestSweepPointJSONNullForUnknown(t *testing.T) {
	t.Parallel()
	res := Result{Incidents: []string{}, Points: []SweepPoint{
		{Steps: 9, Concurrency: 32, OK: true, OutputTokS: 2100, PerStreamTokS: 60, AcceptLen: math.NaN(), AcceptRate: math.NaN()},
		{Steps: 10, Concurrency: 32, Error: "start failed"},
		{Steps: 2, Concurrency: 32, OK: true, OutputTokS: 2800, PerStreamTokS: 60, AcceptLen: 1.9, AcceptRate: 0},
	}}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Points []map[string]any `json:"points"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for i, want := range []map[string]any{
		{"output_tok_s": 2100.0, "accept_len": nil, "accept_rate": nil},
		{"output_tok_s": nil, "per_stream_tok_s": nil, "accept_len": nil, "accept_rate": nil},
		{"output_tok_s": 2800.0, "accept_len": 1.9, "accept_rate": 0.0},
	} {
		for k, v := range want {
			if got, ok := m.Points[i][k]; !ok || got != v {
				t.Errorf("point %d: %s = %v (present %v), want %v", i, k, got, ok, v)
			}
		}
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.Points[0].Measured(MetricAcceptLen) || !math.IsNaN(back.Points[0].AcceptLen) ||
		back.Points[2].AcceptRate != 0 || !back.Points[2].Measured(FigureAcceptRate) {
		t.Errorf("read back %+v (%v)", back.Points, err)
	}
}
