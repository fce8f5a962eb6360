package engine

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const exposition = `# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3-8B"} 1200.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="Qwen/Qwen3-8B"} 300
# a free comment

sglang:spec_accept_length{model_name="m",path="C:\\models\\x",note="say \"hi\"\nbye",} 3.05 1721574013000
lat_bucket{le="+Inf"} 17
lat_bucket { le = "0.5" } 3
weird NaN
up +Inf
down -Inf
plain 1e3
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 9 {
		t.Fatalf("%d samples, want 9: %+v", len(m), m)
	}
	if v, ok := m.Value("vllm:spec_decode_num_drafts_total"); !ok || v != 1500 {
		t.Fatalf("drafts sum %v %v, want 1500", v, ok)
	}
	s := m[2]
	if s.Name != "sglang:spec_accept_length" || s.Value != 3.05 || s.Labels["path"] != `C:\models\x` || s.Labels["note"] != "say \"hi\"\nbye" {
		t.Fatalf("escapes: %+v", s)
	}
	if m[3].Labels["le"] != "+Inf" || m[4].Labels["le"] != "0.5" || m[4].Value != 3 {
		t.Fatalf("buckets: %+v %+v", m[3], m[4])
	}
	if !math.IsNaN(m[5].Value) || !math.IsInf(m[6].Value, 1) || !math.IsInf(m[7].Value, -1) {
		t.Fatalf("special values: %+v", m[5:])
	}
	if v, ok := m.Value("weird"); !ok || v != 0 {
		t.Fatalf("NaN sum %v %v", v, ok)
	}
	if _, ok := m.Value("absent"); ok {
		t.Fatal("absent metric found")
	}
}

func TestParseMetricsRejects(t *testing.T) {
	for _, bad := range []string{
		`x{a="b"`, `x{a=b} 1`, `x{a="b" c="d"} 1`, `x 1 2 3`, `x abc`, `{a="b"} 1`, `x`, `x{a="b",a="c"} 1`, `x-y 1`, `x 1 ts`,
	} {
		if m, err := ParseMetrics(strings.NewReader("ok 1\n" + bad + "\n")); err == nil || m != nil {
			t.Errorf("%q: got %v, %v; want an error", bad, m, err)
		} else if !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: error %q does not name line 2", bad, err)
		}
	}
}

func TestClientMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(exposition))
	}))
	defer srv.Close()
	m, err := New(srv.URL).Metrics(context.Background())
	if err != nil || len(m) != 9 {
		t.Fatalf("got %d samples, %v", len(m), err)
	}
}
