package engine

import (
	"math"
	"strings"
	"testing"
)

func FuzzParseDecodeLine(f *testing.F) {
	f.Add(`[2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, accept len: 3.05, accept rate: 0.68, cuda graph: True, gen throughput (token/s): 239.06, #queue-req: 2`)
	f.Add(`Decode batch. #running-req: 1, accept len: 3.12, gen throughput (token/s): 210.55, #queue-req: 0,`)
	f.Add(`INFO 07-21 15:00:13 [m.py:1] SpecDecoding metrics: Mean acceptance length: 2.63, Avg Draft acceptance rate: 54.3%`)
	f.Fuzz(func(t *testing.T, line string) {
		d, ok := ParseDecodeLine(line)
		if !ok {
			if d != (DecodeLine{}) {
				t.Fatalf("not ok but %+v", d)
			}
			return
		}
		if d.Running < 0 || d.AcceptLen < 0 || d.GenTokS < 0 || math.IsNaN(d.AcceptLen) || math.IsInf(d.AcceptLen, 0) {
			t.Fatalf("impossible values %+v", d)
		}
		if d.Engine != "sglang" && d.Engine != "vllm" {
			t.Fatalf("engine %q", d.Engine)
		}
	})
}

func FuzzParseMetrics(f *testing.F) {
	f.Add(exposition)
	f.Add("x{a=\"b\\\"c\"} 1 2\n")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := ParseMetrics(strings.NewReader(text))
		if err != nil {
			if m != nil {
				t.Fatal("error with samples")
			}
			return
		}
		for _, s := range m {
			if s.Name == "" {
				t.Fatalf("empty name in %+v", s)
			}
		}
	})
}
