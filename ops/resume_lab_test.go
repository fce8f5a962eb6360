package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/internal/testrun"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// A rollout stopped dead right after it recorded that it is about to write
// the second replica's unit (the canary changed, gated and back in the
// router) leaves in the store, as its job's result, a checkpoint that
// carries what an undo needs: each replica it touched, its previous unit
// text byte for byte, the one being written marked so. Recorded
// interrupted, the job is what `mtp undo qwen` finds, and the undo puts
// every replica back on its previous unit, byte for byte, both back in the
// router.
func TestInterruptedRolloutCheckpointIsUndone(t *testing.T) {
	testrun.Long(t)
	ctx := testkit.Context(t, 4*time.Minute)
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "opsbot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := newFleetRig(t, 1, 2, func(c *ops.Config) {
		c.Changes = storeChangeLog{st}
		// The gate's own behaviour is TestRolloutCanaryFailsGate's.
		c.Rollout.MinTokSRatio, c.Rollout.MaxTTFTP95Ratio = 0.3, 5
	})
	before := map[string]string{}
	for i, u := range f.units(t) {
		before[f.names[i]] = u
	}
	j, err := st.CreateJob(ctx, store.Job{Command: "mtp steps 10 qwen", Service: "qwen", Status: store.Queued})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.StartJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	second := f.names[1] // the plan's canary is the first name
	runCtx, crash := context.WithCancel(ctx)
	defer crash()
	var mu sync.Mutex
	var saved []*ops.RolloutResult
	checkpoint := func(ctx context.Context, progress *ops.Result) error {
		if runCtx.Err() != nil {
			return errors.New("the process is dead") // nothing it does now is stored
		}
		b, err := json.Marshal(progress)
		if err != nil {
			return err
		}
		if err := st.SetJobProgress(ctx, j.ID, b); err != nil {
			return err
		}
		var back ops.Result
		if err := json.Unmarshal(b, &back); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		saved = append(saved, back.Rollout)
		for _, rc := range back.Rollout.Replicas {
			if rc.Service == second && rc.Writing {
				crash() // the process dies here: nothing after this checkpoint counts
			}
		}
		return nil
	}
	ev := &events{}
	_, err = f.rb.For(ops.JobHold{JobID: j.ID, Checkpoint: checkpoint}).Rollout(runCtx, "qwen", ops.StepsChange(10), false, ev)
	if err == nil {
		t.Fatalf("the rollout went on after the crash\n%s", ev.text())
	}
	if _, err := st.InterruptUnfinished(ctx, nil); err != nil {
		t.Fatal(err)
	}
	j, err = st.Job(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var res ops.Result
	if err := json.Unmarshal(j.Result, &res); err != nil || res.Rollout == nil {
		t.Fatalf("the interrupted job's result is no rollout checkpoint (%v): %s", err, j.Result)
	}
	t.Logf("%d checkpoints; the last: %s", len(saved), j.Result)
	left := res.Rollout.LeftChanged()
	if len(left) != 2 {
		t.Fatalf("checkpoint records %d replicas changed, want the canary and %s: %+v", len(left), second, res.Rollout.Replicas)
	}
	for _, rc := range left {
		if rc.Unit.Before != before[rc.Service] {
			t.Errorf("checkpoint's previous unit of %s is not the unit before the rollout:\n%s", rc.Service, rc.Unit.Before)
		}
		if !strings.Contains(rc.Unit.After, "--speculative-num-steps 10") || rc.Move == "" {
			t.Errorf("checkpoint's change of %s: move %q, after:\n%s", rc.Service, rc.Move, rc.Unit.After)
		}
		if writing := rc.Service == second; rc.Writing != writing {
			t.Errorf("%s recorded writing=%v, want %v", rc.Service, rc.Writing, writing)
		}
	}

	ev = &events{}
	ures, err := f.rb.MTPUndo(ctx, "qwen", false, ev)
	if err != nil {
		t.Fatalf("mtp undo qwen after the interrupted rollout: %v\n%s", err, ev.text())
	}
	if ures.Rollout == nil || ures.Rollout.Undoes != j.ID {
		t.Errorf("the undo is not of the interrupted job #%d: %+v", j.ID, ures.Rollout)
	}
	for i, u := range f.units(t) {
		if u != before[f.names[i]] {
			t.Errorf("%s after the undo is not its unit before the rollout:\n%s", f.names[i], u)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "both replicas in the router", func() bool { return len(f.router.Workers()) == 2 })
}
