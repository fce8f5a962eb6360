package bench

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opsbot/opsbot/ops/engine"
)

// A run in which every request failed measured nothing: its throughput and
// latencies are unknown, null in JSON and "—" in the table, never 0; it is
// not Measured, so no caller keeps it as a result.
func TestNoSuccessfulRequestMeasuresNothing(t *testing.T) {
	t.Parallel()
	f := fake{ErrorAfter: 3}
	srv := f.start(t)
	res, err := run(t, opts(srv.URL))
	if !errors.Is(err, ErrMostFailed) || res == nil {
		t.Fatalf("err %v res %v", err, res)
	}
	if res.Measured() || Known(res.OutputTokS) || Known(res.PerStreamTokS) || Known(res.TTFT.P50) || Known(res.E2E.Mean) {
		t.Fatalf("figures of a run with no successful request: %+v", res)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"output_tok_s", "per_stream_tok_s", "accept_len", "accept_rate"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null: %s", k, v, ok, b)
		}
	}
	if ttft := m["ttft_ms"].(map[string]any); ttft["p50"] != nil {
		t.Errorf("ttft_ms %v, want null figures", ttft)
	}
	tab := res.Table()
	for _, bad := range []string{"Median TTFT (ms):                        0.00", "Output token throughput (tok/s):         0.00"} {
		if strings.Contains(tab, bad) {
			t.Errorf("table shows %q for a figure it never measured:\n%s", bad, tab)
		}
	}
	for _, want := range []string{"No request succeeded: nothing was measured (—).", "Median TTFT (ms):                        —",
		"Output token throughput (tok/s):         —", "Request throughput (req/s):              —"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || Known(back.OutputTokS) || Known(back.TTFT.P99) {
		t.Errorf("null figures read back as %v, %v (%v), want unknown", back.OutputTokS, back.TTFT.P99, err)
	}
}

// An accept length measured without the drafts per step it divides by (the
// engine chose its steps per batch) leaves the rate unknown: null, "—" with
// the reason once, never 0.
func TestAcceptRateUnknownWithoutDraftsPerStep(t *testing.T) {
	t.Parallel()
	srv := (&fake{}).start(t)
	// SGLang's /server_info: no accept length right after the flush, then a
	// cumulative one once the run logged a decode window (a real HTTP server
	// standing for the engine's acceptance endpoints).
	var flushed, infos atomic.Int64
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flush_cache":
			flushed.Add(1)
		case "/server_info":
			if flushed.Load() > 0 && infos.Add(1) > 1 {
				w.Write([]byte(`{"internal_states":[{"avg_spec_accept_length":3.2}]}`))
				return
			}
			w.Write([]byte(`{"internal_states":[{}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer eng.Close()
	o := opts(srv.URL)
	o.Prompts, o.Concurrency = 2, 1
	o.Acceptance = SGLangAcceptance(engine.New(eng.URL), nil)
	res, err := run(t, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.AcceptLen != 3.2 || Known(res.AcceptRate) || res.AcceptCause != CauseDraftsUnknown {
		t.Fatalf("accept len %v rate %v cause %q", res.AcceptLen, res.AcceptRate, res.AcceptCause)
	}
	b, _ := json.Marshal(res)
	if !strings.Contains(string(b), `"accept_rate":null`) || !strings.Contains(string(b), `"accept_len":3.2`) {
		t.Errorf("JSON: %s", b)
	}
	tab := res.Table()
	if !strings.Contains(tab, "Accept rate (drafts accepted/proposed):  — (drafts per step unknown)") || strings.Contains(tab, "0.00%") {
		t.Errorf("table:\n%s", tab)
	}
}
