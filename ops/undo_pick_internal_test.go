package ops

import "testing"

// TestLastUndoable: mtp undo picks the newest change that succeeded, or a
// rollout that ended otherwise with replicas still changed (interrupted,
// or failed with a rollback that could not finish); never a failed single
// change nor a rollout whose rollback put everything back.
func TestLastUndoable(t *testing.T) {
	changed := &UnitChange{Before: "a", After: "b"}
	leftChanged := &RolloutResult{Replicas: []ReplicaChange{{Service: "qwen@gpu1", Unit: changed}}}
	putBack := &RolloutResult{Replicas: []ReplicaChange{{Service: "qwen@gpu1", Unit: changed, RolledBack: true}}}
	cases := []struct {
		name    string
		changes []AppliedChange
		want    int
	}{
		{"none", nil, -1},
		{"succeeded", []AppliedChange{{Status: "succeeded", Unit: *changed}}, 0},
		{"failed single change", []AppliedChange{{Status: "failed", Unit: *changed}, {Status: "succeeded", Unit: *changed}}, 1},
		{"interrupted rollout left changed", []AppliedChange{{Status: "interrupted", Rollout: leftChanged}}, 0},
		{"failed rollout left changed", []AppliedChange{{Status: "failed", Rollout: leftChanged}}, 0},
		{"failed rollout put back", []AppliedChange{{Status: "failed", Rollout: putBack}, {Status: "succeeded", Unit: *changed}}, 1},
	}
	for _, c := range cases {
		if got := lastUndoable(c.changes); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
