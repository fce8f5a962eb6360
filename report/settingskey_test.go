package report

import (
	"testing"

	"github.com/opsbot/opsbot/ops"
)

// A per-load run is compared only with runs of the same per-load form.
func TestSettingsKeyPerLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    *ops.Spec
		want string
	}{
		{&ops.Spec{Steps: 10, TopK: 1, DraftTokens: 11}, "steps=10,topk=1,draft=11"},
		{&ops.Spec{Steps: 9, TopK: 1, DraftTokens: 10, Adaptive: "/etc/sglang/qwen-adaptive.json"}, "steps=9,topk=1,draft=10,adaptive=/etc/sglang/qwen-adaptive.json"},
		{&ops.Spec{Engine: "vllm", Steps: 10, BatchTable: "[[1,1,10],[2,1024,3]]"}, "steps=10,topk=0,draft=0,table=[[1,1,10],[2,1024,3]]"},
	} {
		if got := SettingsKey(tc.s); got != tc.want {
			t.Errorf("SettingsKey(%+v) = %q, want %q", *tc.s, got, tc.want)
		}
	}
}
