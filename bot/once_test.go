package bot

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
)

// A start's long error (the engine's quoted line and what to try) is shown
// once in a job's thread: in full on the ✖ line of its step; the final
// status message and the result block keep its head and say where it is.
// The job's record keeps it whole.
func TestLongErrorShownOncePerThread(t *testing.T) {
	t.Parallel()
	long := `sglang-qwen.service is in a restart loop (NRestarts 1): "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 9.49 GiB."; ` +
		"the settings need more GPU memory than there is; `engine set mem-fraction-static 0.85 qwen` sets --mem-fraction-static to 0.85 (from 0.88)"
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		rep.Report(ops.Event{Step: "start", Status: ops.StepStarted, Message: "starting sglang-qwen.service"})
		rep.Report(ops.Event{Step: "start", Status: ops.StepFailed, Message: long})
		return &ops.Result{Incidents: []string{ops.IncidentRolledBack}},
			errors.New("start: " + long + "; restored the previous unit (steps 3) and it serves again")
	})
	rec := chatrec.New()
	h := newHarnessWith(t, backend, roles, func(o *jobs.EngineOptions) { o.Chats = map[string]Chat{"test": rec} })
	j := h.wait(h.handle("olga", "mtp steps 14 qwen").JobID)
	if !strings.Contains(j.Error, long) {
		t.Fatalf("the job's record lost the error: %q", j.Error)
	}
	edits, replies := rec.Thread(j.Thread)
	if len(edits) == 0 {
		t.Fatal("no status message")
	}
	shown := []string{edits[len(edits)-1].Text}
	for _, m := range replies {
		shown = append(shown, m.Text)
	}
	all := strings.Join(shown, "\n")
	if n := strings.Count(all, "Tried to allocate 9.49 GiB"); n != 1 {
		t.Errorf("the engine's line is shown %d times in the thread, want once:\n%s", n, all)
	}
	if n := strings.Count(all, "engine set mem-fraction-static 0.85 qwen"); n != 1 {
		t.Errorf("the advice is shown %d times in the thread, want once:\n%s", n, all)
	}
	final := edits[len(edits)-1].Text
	for _, want := range []string{"sglang-qwen.service is in a restart loop (NRestarts 1) (in full in the thread, at ✖ start)", "restored the previous unit (steps 3)"} {
		if !strings.Contains(final, want) {
			t.Errorf("the status message lacks %q:\n%s", want, final)
		}
	}
}
