package engine

import (
	"math"
	"testing"
	"time"
)

func TestParseDecodeLine(t *testing.T) {
	local := func(s string) time.Time {
		tm, err := time.ParseInLocation(time.DateTime, s, time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		name, line string
		want       DecodeLine
	}{
		{"new", `[2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, accept len: 3.05, accept rate: 0.68, cuda graph: True, gen throughput (token/s): 239.06, #queue-req: 2`,
			DecodeLine{Time: local("2026-07-21 15:00:13"), Engine: "sglang", Running: 24, AcceptLen: 3.05, AcceptRate: 0.68, HasRate: true, GenTokS: 239.06}},
		{"old", `[2025-01-02 03:04:05] Decode batch. #running-req: 1, #token: 1200, token usage: 0.01, accept len: 3.12, gen throughput (token/s): 210.55, #queue-req: 0,`,
			DecodeLine{Time: local("2025-01-02 03:04:05"), Engine: "sglang", Running: 1, AcceptLen: 3.12, GenTokS: 210.55}},
		{"hybrid", `Decode batch, #running-req: 8, #full token: 5000, full token usage: 0.10, #swa token: 100, swa token usage: 0.01, accept len: 2.50, accept rate: 0.50, gen throughput (token/s): 99, #queue-req: 0`,
			DecodeLine{Engine: "sglang", Running: 8, AcceptLen: 2.5, AcceptRate: 0.5, HasRate: true, GenTokS: 99}},
		{"no spec", `[2026-07-21 15:00:13 DP1 TP0] Decode batch, #running-req: 3, #token: 100, token usage: 0.00, cuda graph: True, gen throughput (token/s): 50.5, #queue-req: 0`,
			DecodeLine{Time: local("2026-07-21 15:00:13"), Engine: "sglang", Running: 3, GenTokS: 50.5}},
		{"journal", `Jul 21 15:00:13 gpu1 python[4242]: [2026-07-21 15:00:13 TP0] Decode batch, #running-req: 2, accept len: 1.00, gen throughput (token/s): 1.5, #queue-req: 0`,
			DecodeLine{Time: local("2026-07-21 15:00:13"), Engine: "sglang", Running: 2, AcceptLen: 1, GenTokS: 1.5}},
		{"vllm", `INFO 07-21 15:00:13 [metrics.py:123] SpecDecoding metrics: Mean acceptance length: 2.63, Accepted throughput: 52.19 tokens/s, Drafted throughput: 96.19 tokens/s, Accepted: 522 tokens, Drafted: 962 tokens, Per-position acceptance rate: 0.736, 0.551, Avg Draft acceptance rate: 54.3%`,
			DecodeLine{Engine: "vllm", AcceptLen: 2.63, AcceptRate: 0.543, HasRate: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseDecodeLine(tc.line)
			if !ok {
				t.Fatal("not recognised")
			}
			if tc.want.Engine == "vllm" {
				if got.Time.IsZero() || got.Time.Month() != time.July || got.Time.Day() != 21 || got.Time.Hour() != 15 {
					t.Fatalf("vllm time %v", got.Time)
				}
				got.Time = time.Time{}
			}
			if !got.Time.Equal(tc.want.Time) {
				t.Fatalf("time %v, want %v", got.Time, tc.want.Time)
			}
			got.Time, tc.want.Time = time.Time{}, time.Time{}
			if math.Abs(got.AcceptRate-tc.want.AcceptRate) < 1e-9 {
				got.AcceptRate = tc.want.AcceptRate
			}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseDecodeLineOthers(t *testing.T) {
	for _, line := range []string{
		"", "The server is fired up and ready to roll!",
		"[2026-07-21 15:00:13 TP0] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
		"INFO 07-21 15:00:13 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s",
		"SpecDecoding metrics: nothing here",
	} {
		if d, ok := ParseDecodeLine(line); ok {
			t.Errorf("%q recognised as %+v", line, d)
		}
	}
}
