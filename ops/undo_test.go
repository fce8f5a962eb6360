package ops_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/ops/engine"
)

// history is the job history mtp undo reads, as data: the store's query and
// its adapter in bot have their own tests, and cmd/opsbot runs mtp undo
// through them end to end; here the pipeline meets the lab over real SSH.
type history struct {
	mu      sync.Mutex
	changes []ops.AppliedChange // newest first
}

func (h *history) UnitChanges(_ context.Context, _ string, limit int) ([]ops.AppliedChange, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ops.AppliedChange(nil), h.changes[:min(limit, len(h.changes))]...), nil
}

func (h *history) add(c ops.AppliedChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append([]ops.AppliedChange{c}, h.changes...)
}

// mtp undo puts back the text the last successful change replaced, through
// the change pipeline (the engine then runs the old settings, verified and
// benchmarked); it refuses, changing nothing, when there is nothing to undo
// and when the unit changed since that change, naming the job that changed
// it when one did.
func TestMTPUndo(t *testing.T) {
	t.Parallel()
	h := &history{}
	r := newRig(t, labOpts(), func(c *ops.Config) { c.Changes = h })
	original := r.unitText(t)

	_, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ops.Discard)
	var none *ops.NothingToUndoError
	if !errors.As(err, &none) {
		t.Fatalf("undo with no change: %v, want NothingToUndoError", err)
	}
	// A failed job's change is not undone: only a successful one.
	h.add(ops.AppliedChange{JobID: 1, Command: "mtp steps 9 qwen", Status: "failed", Unit: ops.UnitChange{Path: "/etc/systemd/system/sglang-qwen.service", Before: original, After: "x"}})
	if _, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ops.Discard); !errors.As(err, &none) {
		t.Fatalf("undo with only a failed change: %v, want NothingToUndoError", err)
	}

	res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 6, false, ops.Discard)
	if err != nil {
		t.Fatalf("mtp steps 6: %v", err)
	}
	h.add(ops.AppliedChange{JobID: 2, Command: "mtp steps 6 qwen", Status: "succeeded", Unit: *res.Unit})
	changed := r.unitText(t)

	dry, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", true, ops.Discard)
	if err != nil || r.unitText(t) != changed || !strings.Contains(dry.Unit.Diff, "+    --speculative-num-steps 3") {
		t.Fatalf("dry run: %v, diff %q; unit changed: %v", err, dry.Unit.Diff, r.unitText(t) != changed)
	}
	ev := &events{}
	res, err = r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ev)
	if err != nil {
		t.Fatalf("mtp undo: %v\n%s", err, ev.text())
	}
	if r.unitText(t) != original {
		t.Fatalf("the unit is not the text before #2:\n%s", r.unitText(t))
	}
	if res.Spec.Steps != 3 || res.Spec.LiveSteps != 3 || res.Bench == nil || res.Unit.Before != changed || res.Unit.After != original {
		t.Fatalf("result: spec %+v bench %v unit %+v", res.Spec, res.Bench != nil, res.Unit)
	}
	for _, step := range []string{"stop done", "clear GPUs done", "write unit done", "verify done", "benchmark done"} {
		if !strings.Contains(ev.text(), step) {
			t.Errorf("undo did not go through %q:\n%s", step, ev.text())
		}
	}

	// The unit now holds the original text, not what #2 wrote: undoing #2
	// again would throw away what changed it since.
	before := r.lab.Host(r.svc.Host).Unit(r.svc.Unit)
	_, err = r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ops.Discard)
	var ce *ops.UnitChangedError
	if !errors.As(err, &ce) || ce.By != nil || !strings.Contains(err.Error(), "not by an opsbot job") {
		t.Fatalf("undo after a change outside the history: %v, want UnitChangedError naming no job", err)
	}
	// #3, after #2, was cancelled after writing: it left the text it holds.
	h.add(ops.AppliedChange{JobID: 3, Command: "mtp steps 4 qwen", Status: "cancelled",
		Unit: ops.UnitChange{Path: res.Unit.Path, Before: changed, After: original}})
	_, err = r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ops.Discard)
	if !errors.As(err, &ce) || ce.By == nil || ce.By.JobID != 3 || !strings.Contains(err.Error(), "#3 `mtp steps 4 qwen` (cancelled)") {
		t.Fatalf("undo after a cancelled job changed the unit: %v, want UnitChangedError naming #3", err)
	}
	after := r.lab.Host(r.svc.Host).Unit(r.svc.Unit)
	if r.unitText(t) != original || after.MainPID != before.MainPID || after.NRestarts != before.NRestarts {
		t.Fatalf("a refused undo changed the host: %+v -> %+v", before, after)
	}
}

// With edit: drop-in, the change mtp steps made is a new drop-in; mtp undo
// puts back what it replaced (nothing: the drop-in is emptied) and the
// engine runs the main unit's settings again.
func TestMTPUndoDropIn(t *testing.T) {
	t.Parallel()
	h := &history{}
	r := newRig(t, labOpts(), func(c *ops.Config) {
		s := c.Services["qwen"]
		s.DropIn = true
		c.Services["qwen"] = s
		c.Changes = h
	})
	main := r.unitText(t)
	res, err := r.rb.MTPSteps(testkit.Context(t, 60*time.Second), "qwen", 7, false, ops.Discard)
	if err != nil {
		t.Fatalf("mtp steps 7: %v", err)
	}
	h.add(ops.AppliedChange{JobID: 1, Command: "mtp steps 7 qwen", Status: "succeeded", Unit: *res.Unit})
	ev := &events{}
	undo, err := r.rb.MTPUndo(testkit.Context(t, 60*time.Second), "qwen", false, ev)
	if err != nil {
		t.Fatalf("mtp undo: %v\n%s", err, ev.text())
	}
	b, err := r.lab.Host("gpu1").ReadFile(res.Unit.Path)
	if err != nil || strings.TrimSpace(string(b)) != "" || r.unitText(t) != main {
		t.Fatalf("after undo: drop-in %q (%v); main unit unchanged: %v", b, err, r.unitText(t) == main)
	}
	info, err := engine.New(r.svc.URL).ServerInfo(testkit.Context(t, 60*time.Second))
	if err != nil || info.Steps != 3 || undo.Spec.LiveSteps != 3 {
		t.Fatalf("engine runs %+v (%v), want steps 3", info, err)
	}
}
