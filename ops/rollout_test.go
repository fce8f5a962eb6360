package ops_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/ops"
)

func replicated(n int, router bool) map[string]ops.ServiceConfig {
	out := map[string]ops.ServiceConfig{"other": {Host: "h0"}}
	for _, h := range []string{"gpu1", "gpu2", "gpu3", "gpu4"}[:n] {
		r := &ops.ReplicaOf{Group: "qwen", Name: h}
		if router {
			r.Router = &ops.RouterConfig{URL: "http://127.0.0.1:30080", Kind: "sglang"}
		}
		out[ops.ReplicaName("qwen", h)] = ops.ServiceConfig{Host: h, Replica: r}
	}
	return out
}

// The plan: the canary first, its sibling the next replica, then waves of
// at most max_unavailable; the text names the gate and the router.
func TestRolloutPlan(t *testing.T) {
	p, err := ops.RolloutPlanOf(replicated(4, true), ops.RolloutConfig{MaxUnavailable: 2}, "qwen", ops.StepsChange(10))
	if err != nil {
		t.Fatal(err)
	}
	if p.Canary != "qwen@gpu1" || p.Sibling != "qwen@gpu2" || len(p.Waves) != 2 || len(p.Waves[0]) != 2 || p.Waves[1][0] != "qwen@gpu4" {
		t.Fatalf("plan: %+v", p)
	}
	text := p.Text()
	for _, want := range []string{"mtp steps 10 over 4 replicas of qwen, at most 2 out", "canary qwen@gpu1", "at least 0.97x", "at most 1.2x",
		"2. qwen@gpu2, qwen@gpu3", "3. qwen@gpu4"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "no router") {
		t.Errorf("plan says no router:\n%s", text)
	}
	p, _ = ops.RolloutPlanOf(replicated(1, false), ops.RolloutConfig{}, "qwen", ops.StepsChange(0))
	if !strings.Contains(p.Text(), "mtp off over 1 replicas") || !strings.Contains(p.Text(), "no unchanged sibling") || !strings.Contains(p.Text(), "no router") {
		t.Errorf("one replica, no router:\n%s", p.Text())
	}
	if _, err := ops.RolloutPlanOf(replicated(2, true), ops.RolloutConfig{}, "other", ops.StepsChange(3)); err == nil {
		t.Error("a plan for a service without replicas")
	}
	if !ops.IsGroup(replicated(2, true), "qwen") || ops.IsGroup(replicated(2, true), "other") {
		t.Error("IsGroup")
	}
}

// A gate's figure not measured is null in JSON and reads back unknown.
func TestGateResultJSONUnknownIsNull(t *testing.T) {
	g := ops.GateResult{Canary: "a", Sibling: "b", CanaryTokS: 90, SiblingTokS: math.NaN(), TokSRatio: math.NaN(),
		CanaryTTFTP95: 10, SiblingTTFTP95: 10, TTFTP95Ratio: 1, Failed: []string{"tok/s unknown"}}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"sibling_tok_s":null`) || !strings.Contains(string(b), `"tok_s_ratio":null`) || !strings.Contains(string(b), `"canary_tok_s":90`) {
		t.Fatalf("json: %s", b)
	}
	var back ops.GateResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(back.SiblingTokS) || back.CanaryTokS != 90 || back.Canary != "a" || len(back.Failed) != 1 {
		t.Fatalf("read back: %+v", back)
	}
}

// The gate fails closed: an unknown figure fails with its reason; a ratio
// past its threshold fails saying by how much.
func TestGateJudge(t *testing.T) {
	g := &ops.GateResult{CanaryTokS: 91, SiblingTokS: 100, CanaryTTFTP95: 130, SiblingTTFTP95: 100, MinTokSRatio: 0.97, MaxTTFTP95Ratio: 1.2}
	ops.Judge(g, "", "")
	if g.Pass || len(g.Failed) != 2 || g.Failed[0] != "tok/s 0.91x the sibling's (91.0 against 100.0), gate 0.97x" || g.Failed[1] != "TTFT p95 1.30x the sibling's (130 ms against 100 ms), gate 1.2x" {
		t.Fatalf("%+v", g)
	}
	g = &ops.GateResult{CanaryTokS: math.NaN(), SiblingTokS: 100, CanaryTTFTP95: math.NaN(), SiblingTTFTP95: 100, MinTokSRatio: 0.97, MaxTTFTP95Ratio: 1.2}
	ops.Judge(g, "qwen@gpu1 round 1: no request succeeded", "")
	if g.Pass || !strings.Contains(strings.Join(g.Failed, "; "), "tok/s unknown, so the gate fails: qwen@gpu1 round 1: no request succeeded") {
		t.Fatalf("%+v", g)
	}
	g = &ops.GateResult{CanaryTokS: 99, SiblingTokS: 100, CanaryTTFTP95: 110, SiblingTTFTP95: 100, MinTokSRatio: 0.97, MaxTTFTP95Ratio: 1.2}
	ops.Judge(g, "", "")
	if !g.Pass || g.Failed != nil {
		t.Fatalf("%+v", g)
	}
}
