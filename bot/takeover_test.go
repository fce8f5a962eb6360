package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// newTakeoverHarness is a harness whose configuration has the replicated
// service qwen (qwen@gpu1, qwen@gpu2) and whose backend records the text
// of every command it runs and succeeds. The backend is a stand-in: this
// test is of the door's rule (which rollback it starts, as whom, audited
// how, what the room is told); the rollback itself is ops's, run on the lab
// by ops's TestInterruptedRolloutCheckpointIsUndone and end to end by
// cmd/opsbot's TestKilledMidRolloutIsRolledBackAtNextStart.
func newTakeoverHarness(t *testing.T) (*harness, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var ran []string
	h := newHarness(t, jobtest.Func(func(_ context.Context, cmd commands.Job, _ ops.Reporter) (*ops.Result, error) {
		mu.Lock()
		ran = append(ran, commands.Text(cmd))
		mu.Unlock()
		return &ops.Result{Summary: "done"}, nil
	}), roles)
	h.disp.cmds.Store(&commands.Options{Services: []commands.ServiceRef{
		{Name: "qwen@gpu1", Host: "gpu1", Group: "qwen"},
		{Name: "qwen@gpu2", Host: "gpu2", Group: "qwen"},
	}, Hosts: []string{"gpu1", "gpu2"}})
	return h, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ran...)
	}
}

// runningJob records job cmd running with result as its checkpoint, as a
// process that then died leaves it.
func runningJob(t *testing.T, h *harness, cmd, service string, result any) store.Job {
	t.Helper()
	ctx := context.Background()
	j, err := h.store.CreateJob(ctx, store.Job{Platform: "test", Room: "ops", User: "test:olga", Command: cmd, Service: service, Status: store.Queued})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.StartJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.store.SetJobProgress(ctx, j.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

// recoverOne runs the engine's RecoverInterrupted, which must record
// exactly job id interrupted, and returns the notice its room was told.
func recoverOne(t *testing.T, h *harness, id int64) string {
	t.Helper()
	got, err := h.eng.RecoverInterrupted(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("RecoverInterrupted recorded %+v, want job #%d alone", got, id)
	}
	var notice string
	for _, m := range h.chat.Posts() {
		if strings.Contains(m.Text, fmt.Sprintf("#%d `", id)) && strings.Contains(m.Text, "was interrupted") {
			notice = m.Text
		}
	}
	if notice == "" {
		t.Fatalf("the room was not told of #%d: %+v", id, h.chat.Posts())
	}
	return notice
}

func jobsAfter(t *testing.T, h *harness, id int64) []store.Job {
	t.Helper()
	all, err := h.store.ListJobs(context.Background(), store.JobFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Job
	for _, j := range all {
		if j.ID > id {
			out = append(out, j)
		}
	}
	return out
}

// TestTakeoverRollsBackAnInterruptedRollout: a rollout job of a dead
// process whose checkpoint records qwen@gpu1 changed (and qwen@gpu2 being
// written) and not put back is recorded interrupted, and the door starts
// `mtp undo qwen` as user opsbot, unasked: its job row, its audit row
// naming the interrupted job, and the room's notice naming the replicas,
// their move and the rollback's job.
func TestTakeoverRollsBackAnInterruptedRollout(t *testing.T) {
	t.Parallel()
	h, ran := newTakeoverHarness(t)
	ctx := context.Background()
	before, after := "ExecStart=sglang --speculative-num-steps 3\n", "ExecStart=sglang --speculative-num-steps 10\n"
	res := ops.Result{Rollout: &ops.RolloutResult{Group: "qwen", Change: "steps 10", Replicas: []ops.ReplicaChange{
		{Service: "qwen@gpu1", Unit: &ops.UnitChange{Before: before, After: after}, Move: "steps 3 -> 10"},
		{Service: "qwen@gpu2", Unit: &ops.UnitChange{Before: before, After: after}, Move: "steps 3 -> 10", Writing: true},
	}}}
	j := runningJob(t, h, "mtp steps 10 qwen", "qwen", res)
	notice := recoverOne(t, h, j.ID)

	later := jobsAfter(t, h, j.ID)
	if len(later) != 1 {
		t.Fatalf("jobs after the takeover: %+v, want one rollback", later)
	}
	u := later[0]
	if u.Command != "mtp undo qwen" || u.User != TakeoverUser || u.Platform != "test" || u.Room != "ops" {
		t.Errorf("rollback job: %q by %q in %s/%s, want `mtp undo qwen` by %s in test/ops", u.Command, u.User, u.Platform, u.Room, TakeoverUser)
	}
	if u = h.wait(u.ID); u.Status != store.Succeeded {
		t.Errorf("rollback job ended %s: %s", u.Status, u.Error)
	}
	if got := ran(); len(got) != 1 || got[0] != "mtp undo qwen" {
		t.Errorf("the backend ran %q, want `mtp undo qwen` once", got)
	}
	audit, err := h.store.Audit(ctx, store.AuditFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var row *store.AuditEntry
	for i, a := range audit {
		if a.JobID == u.ID {
			row = &audit[i]
		}
	}
	wantDecision := fmt.Sprintf("takeover of interrupted rollout #%d: rolled back", j.ID)
	if row == nil || row.Decision != wantDecision || row.User != TakeoverUser || row.Command != "mtp undo qwen" {
		t.Errorf("audit of the rollback: %+v, want decision %q by %s", row, wantDecision, TakeoverUser)
	}

	for _, want := range []string{
		fmt.Sprintf("#%d `mtp steps 10 qwen` was interrupted", j.ID),
		"The rollout was interrupted after changing qwen@gpu1 (steps 3 -> 10), qwen@gpu2 (steps 3 -> 10)",
		fmt.Sprintf("rolling back: #%d (`mtp undo qwen`)", u.ID),
		"Why: a rollout interrupted before its end is rolled back, not resumed",
	} {
		if !strings.Contains(notice, want) {
			t.Errorf("notice lacks %q:\n%s", want, notice)
		}
	}
	t.Logf("notice: %s", notice)

	// Recorded once: a second recovery finds nothing and starts nothing.
	if again, err := h.eng.RecoverInterrupted(ctx); err != nil || len(again) != 0 {
		t.Errorf("second RecoverInterrupted: %+v, %v; want nothing", again, err)
	}
	if n := len(jobsAfter(t, h, j.ID)); n != 1 {
		t.Errorf("%d jobs after a second recovery, want the one rollback", n)
	}
}

// TestTakeoverOfARolloutThatChangedNothing: a rollout checkpoint that
// records no replica changed (the canary's change not begun, or put back)
// is reported as such, and nothing is started.
func TestTakeoverOfARolloutThatChangedNothing(t *testing.T) {
	t.Parallel()
	for name, replicas := range map[string][]ops.ReplicaChange{
		"none yet": nil,
		"put back": {{Service: "qwen@gpu1", Unit: &ops.UnitChange{Before: "a\n", After: "b\n"}, Move: "steps 3 -> 10", RolledBack: true}},
		"no unit":  {{Service: "qwen@gpu1"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, ran := newTakeoverHarness(t)
			res := ops.Result{Rollout: &ops.RolloutResult{Group: "qwen", Change: "steps 10", Replicas: replicas}}
			j := runningJob(t, h, "mtp steps 10 qwen", "qwen", res)
			notice := recoverOne(t, h, j.ID)
			if want := "The rollout had changed no replica of qwen yet, so nothing is rolled back."; !strings.Contains(notice, want) {
				t.Errorf("notice lacks %q:\n%s", want, notice)
			}
			if later := jobsAfter(t, h, j.ID); len(later) != 0 || len(ran()) != 0 {
				t.Errorf("jobs started: %+v, ran %q; want none", later, ran())
			}
		})
	}
}

// TestTakeoverLeavesOtherJobsAlone: an interrupted job that is no rollout
// (a change of one replica, a job with no result yet, a result that is not
// JSON) gets the interrupted notice alone, and nothing is started.
func TestTakeoverLeavesOtherJobsAlone(t *testing.T) {
	t.Parallel()
	for name, result := range map[string]any{
		"one replica":  ops.Result{Summary: "steps 3 -> 10"},
		"no result":    nil,
		"not a result": json.RawMessage(`[1,2]`),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, ran := newTakeoverHarness(t)
			j := runningJob(t, h, "mtp steps 10 qwen@gpu1", "qwen@gpu1", result)
			notice := recoverOne(t, h, j.ID)
			if strings.Contains(notice, "rollout") || strings.Contains(notice, "rolled back") {
				t.Errorf("notice of a job that is no rollout speaks of a rollback:\n%s", notice)
			}
			if got := h.disp.takeover(context.Background(), j); got != "" {
				t.Errorf("takeover of a job that is no rollout = %q, want \"\"", got)
			}
			if later := jobsAfter(t, h, j.ID); len(later) != 0 || len(ran()) != 0 {
				t.Errorf("jobs started: %+v, ran %q; want none", later, ran())
			}
		})
	}
}
