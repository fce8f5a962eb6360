package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// The final message of a job that did not succeed: what happened, the state
// it left the service in (each state a pipeline can leave), and the one
// command that helps next. Explain and RenderResult run as the engine runs
// them at the end of a job.
func TestFinalMessagesGolden(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 3, 4, 5, 0, time.UTC)
	stopped := func(cause, err error) error { return &jobStopped{cause: cause, err: err} }
	waitErr := fmt.Errorf("wait until ready: http://127.0.0.1:30000 not serving after 4s (last: port refused (loading the model)): %w", context.Canceled)
	cases := []struct {
		title   string
		command string
		err     error
		status  store.Status
		left    *ops.ServiceLeft
		summary string
	}{
		{"failed before touching the service (read unit)", "mtp steps 6 qwen",
			errors.New("read unit: read /etc/systemd/system/sglang-qwen.service on gpu1: connection refused"), store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftServing, Unit: ops.UnitOld, Steps: 3}, ""},
		{"failed after the stop, unit unchanged (GPUs held)", "mtp steps 6 qwen",
			errors.New("clear GPUs: GPU 1 still holds 40000 MiB after 2m0s"), store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStopped, Unit: ops.UnitOld, Steps: 3, Changed: true, NextStep: ops.NextRecover, Next: "gpu recover qwen"}, ""},
		{"failed with the new unit written, not started", "mtp steps 6 qwen",
			errors.New("start: systemctl start sglang-qwen.service on gpu1: connection lost"), store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStopped, Unit: ops.UnitNew, Steps: 6, Changed: true, NextStep: ops.NextStart, Next: "svc start qwen", UndoSteps: 3, Undo: "mtp steps 3 qwen"}, ""},
		{"failed, rolled back, previous unit restored but not started", "mtp steps 6 qwen",
			errors.New("start: sglang-qwen.service is in a restart loop (NRestarts 3); rolling back to the previous unit (steps 3) also failed: stop: timed out"), store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStopped, Unit: ops.UnitOld, Steps: 3, Changed: true, RolledBack: true, NextStep: ops.NextStart, Next: "svc start qwen"}, ""},
		{"gpu recover failed, GPUs still held", "gpu recover qwen",
			errors.New("clear GPUs: GPU 1 still holds 40000 MiB after 2m0s"), store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStopped, Changed: true, NextStep: ops.NextGPUs, Next: "gpu status gpu1"}, ""},
		{"failed, state unknown (host gone)", "svc restart qwen",
			errors.New("stop: systemctl stop sglang-qwen.service on gpu1: ssh: connection lost"), store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftUnknown, Changed: true, NextStep: ops.NextStatus, Next: "svc status qwen"}, ""},
		{"cancelled while the new unit loads", "mtp steps 6 qwen",
			stopped(ErrCancelled, waitErr), store.Cancelled,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStarting, Unit: ops.UnitNew, Steps: 6, Changed: true, Started: true, NextStep: ops.NextStatus, Next: "svc status qwen", UndoSteps: 3, Undo: "mtp steps 3 qwen"}, ""},
		{"cancelled after the write, before the start", "mtp steps 6 qwen",
			stopped(ErrCancelled, fmt.Errorf("before the start (the new unit is written): %w", context.Canceled)), store.Cancelled,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStopped, Unit: ops.UnitNew, Steps: 6, Changed: true, NextStep: ops.NextStart, Next: "svc start qwen", UndoSteps: 3, Undo: "mtp steps 3 qwen"}, ""},
		{"stopped by shutdown (Ctrl-C, SIGTERM) while the new unit loads", "mtp steps 6 qwen",
			stopped(ErrShutdown, waitErr), store.Cancelled,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStarting, Unit: ops.UnitNew, Steps: 6, Changed: true, Started: true, NextStep: ops.NextStatus, Next: "svc status qwen", UndoSteps: 3, Undo: "mtp steps 3 qwen"}, ""},
		{"timed out", "mtp steps 6 qwen",
			stopped(errors.New("timed out after 30m0s"), waitErr), store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStarting, Unit: ops.UnitNew, Steps: 6, Changed: true, Started: true, NextStep: ops.NextStatus, Next: "svc status qwen", UndoSteps: 3, Undo: "mtp steps 3 qwen"}, ""},
		{"D state", "gpu recover qwen",
			&ops.StuckProcessError{Service: "qwen", Node: "pve",
				Msg:    "on pve, PID 4242 (sglang::scheduler_TP0) holding GPU 0 in D state (uninterruptible, inside the GPU driver): no signal can kill it, so qwen's GPUs cannot be cleared",
				Advice: "reset GPU 0 (`nvidia-smi --gpu-reset -i 0` on pve, once nothing else uses it), or reboot pve; `gpu recover` cannot help: no signal ends a process in D state"},
			store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftStopped, Changed: true,
				Advice: "reset GPU 0 (`nvidia-smi --gpu-reset -i 0` on pve, once nothing else uses it), or reboot pve; `gpu recover` cannot help: no signal ends a process in D state"}, ""},
		{"rolled back after the verify failed", "mtp steps 6 qwen",
			errors.New("verify: the engine does not run the new settings: the engine reports steps 3, topk 1, draft tokens 4; the unit says 6, 1, 7: something else sets them (a drop-in, an environment file?); restored the previous unit (steps 3) and it serves again"),
			store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftServing, Unit: ops.UnitOld, Steps: 3, Changed: true, RolledBack: true}, ""},
		{"rolled back after the ready timeout", "mtp steps 6 qwen",
			errors.New("wait until ready: http://127.0.0.1:30000 not serving after 15m0s (the ready timeout; last: port refused (loading the model)); restored the previous unit (steps 3) and it serves again"),
			store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftServing, Unit: ops.UnitOld, Steps: 3, Changed: true, RolledBack: true}, ""},
		{"benchmark failed, the new unit kept", "mtp steps 6 qwen",
			errors.New("benchmark: benchmark http://127.0.0.1:30000: 16 of 16 requests failed; the new unit (steps 6) stays: the engine serves it and runs the new settings (`mtp steps 3 qwen` puts steps 3 back)"),
			store.Failed,
			&ops.ServiceLeft{Service: "qwen", State: ops.LeftServing, Unit: ops.UnitNew, Steps: 6, Changed: true, UndoSteps: 3, Undo: "mtp steps 3 qwen"}, ""},
	}
	var b strings.Builder
	for i, c := range cases {
		v := report.JobView{ID: int64(50 + i), Command: c.command, User: "olga", Status: c.status, Started: t0, Ended: t0.Add(42 * time.Second),
			Error: Explain(c.err)}
		res := &ops.Result{Summary: c.summary, Incidents: []string{}, Left: c.left}
		b.WriteString("## " + c.title + "\n")
		b.WriteString(report.RenderStatus(v, t0) + "\n")
		b.WriteString(report.RenderResult(v, res) + "\n\n")
	}
	testkit.Golden(t, "final.golden", b.String())
}
