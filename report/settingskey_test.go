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

// The per-load form is the table's contents, not the file's path: two tables written to one
// path are two forms, one table at two paths (or respaced, keys reordered) is one; the
// switch SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND makes another form.
func TestSettingsKeyByTableContents(t *testing.T) {
	t.Parallel()
	a := ops.AdaptiveTableID("{\n  \"1\": {\"candidate_steps\": [9]},\n  \"64\": {\"candidate_steps\": [0]}\n}\n")
	b := ops.AdaptiveTableID("{\n  \"1\": {\"candidate_steps\": [9]},\n  \"64\": {\"candidate_steps\": [1]}\n}\n")
	a2 := ops.AdaptiveTableID(`{"64":{"candidate_steps":[0]},"1":{"candidate_steps":[9]}}`)
	const path = "/etc/sglang/qwen-adaptive.json"
	key := func(table, path string, skip bool) string {
		return SettingsKey(&ops.Spec{Steps: 9, TopK: 1, DraftTokens: 10, Adaptive: path, AdaptiveTable: table, SkipZeroDraftExtend: skip})
	}
	if key(a, path, false) == key(b, path, false) {
		t.Errorf("two tables at one path share the key %q", key(a, path, false))
	}
	if key(a, path, false) != key(a2, "/etc/sglang/other.json", false) {
		t.Errorf("one table (respaced, keys reordered) at two paths: %q and %q", key(a, path, false), key(a2, "/etc/sglang/other.json", false))
	}
	if key(a, path, true) == key(a, path, false) || key(a, path, true) != "steps=9,topk=1,draft=10,adaptive="+a+",skip_zero_extend" {
		t.Errorf("with the switch: %q", key(a, path, true))
	}
}
