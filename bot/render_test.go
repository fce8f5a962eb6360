package bot

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/internal/testkit"
	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/report"
	"github.com/opsbot/opsbot/store"
)

// renderReply writes a reply as an adapter sees it: outcome, audience, text
// and actions, with the random token replaced.
func renderReply(r Reply) string {
	var b strings.Builder
	aud := map[Audience]string{ToUser: "to user", ToRoom: "to room"}[r.Audience]
	b.WriteString(string(r.Outcome) + " (" + aud + ")\n")
	text := r.Text
	if r.Token != "" {
		text = strings.ReplaceAll(text, r.Token, "TOKEN")
	}
	b.WriteString(text + "\n")
	for _, a := range r.Actions {
		id := a.ID
		if r.Token != "" {
			id = strings.ReplaceAll(id, r.Token, "TOKEN")
		}
		exp := ""
		if !a.Expires.IsZero() {
			exp = " expires"
		}
		b.WriteString("[" + a.Label + "] " + id + exp + "\n")
	}
	return b.String()
}

// The replies people read: previews with their actions, refusals, the
// answers of dry runs, and a queued job's acknowledgement.
func TestRepliesGolden(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	// A fixed clock: a schedule's dry run names its first firing.
	fixed := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	h.now.Store(&fixed)
	ctx := context.Background()
	var b strings.Builder
	add := func(title string, r Reply) {
		b.WriteString("## " + title + "\n" + renderReply(r) + "\n")
	}
	add("gpu recover --force --no-start, asked by an admin", h.handle("alice", "gpu recover qwen --force --no-start"))
	add("svc stop", h.handle("olga", "svc stop qwen"))
	add("schedule add of a command that needs confirmation", h.handle("alice", "schedule add @daily gpu recover qwen"))
	add("proposal", h.disp.Propose(ctx, "test", "ops", "gpu recover qwen", "qwen is in a restart loop: GPU memory is held."))
	add("refused for the role", h.handle("vic", "mtp steps 10 qwen"))
	add("confirm of another user's request", h.handle("vic", "confirm "+h.handle("olga", "svc stop llama").Token))
	add("usage error", h.handle("olga", "mtp steps 99"))
	add("schedule add --dry-run", h.handle("alice", `schedule add --dry-run "0 3 * * *" sweep qwen steps 1..3`))
	q := h.handle("olga", "svc restart qwen")
	h.wait(q.JobID)
	add("queued", q)
	testkit.Golden(t, "replies.golden", b.String())
}

// The status message, step lines and result block of a job.
func TestThreadGolden(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	v := report.JobView{ID: 42, Command: "mtp steps 10 qwen", User: "olga", Status: store.Queued}
	var b strings.Builder
	line := func(s string) { b.WriteString(s + "\n") }
	line(report.RenderStatus(v, t0))
	v.StepMessage = "waiting for gpu1: another job is changing it"
	line(report.RenderStatus(v, t0))
	v.Status, v.Started, v.Step, v.StepMessage = store.Running, t0, "wait until ready", "503 warming up"
	line(report.RenderStatus(v, t0.Add(83*time.Second)))
	for _, e := range []ops.Event{
		{At: t0, Step: "stop", Status: ops.StepStarted, Message: "systemctl stop sglang-qwen.service"},
		{At: t0.Add(2 * time.Second), Step: "clear GPUs", Status: ops.StepWarning, Message: "GPU 0 holds 81234 MiB after the stop"},
		{At: t0.Add(5 * time.Second), Step: "benchmark", Status: ops.StepDone, Message: "281.3 tok/s (281.3 per stream)"},
		{At: t0.Add(6 * time.Second), Step: "verify", Status: ops.StepFailed, Message: "engine reports steps 3"},
		{At: t0.Add(7 * time.Second), Step: "bench", Status: ops.StepSkipped},
	} {
		line(report.RenderEvent(e))
	}
	v.Status, v.Ended, v.Summary = store.Succeeded, t0.Add(125*time.Second), "steps 3 -> 10, 281.3 tok/s"
	line(report.RenderStatus(v, t0.Add(125*time.Second)))
	res := &ops.Result{Summary: v.Summary, Incidents: []string{ops.IncidentGPUMemoryHeld},
		Details: []string{"same settings last time (#40, 2026-02-28 03:04): 270.0 → 281.3 tok/s (+4.2%), accept len 3.10 → 3.20"}}
	line(report.RenderResult(v, res))
	f := report.JobView{ID: 43, Command: "gpu recover qwen", User: "olga", Status: store.Failed, Started: t0, Ended: t0.Add(9 * time.Second),
		Error: "GPU 2: pid 4242 is in D state: needs GPU reset or reboot"}
	line(report.RenderStatus(f, t0))
	line(report.RenderResult(f, nil))
	testkit.Golden(t, "thread.golden", b.String())
}
