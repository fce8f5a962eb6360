package bot

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/chatrec"
	"github.com/opsbot/opsbot/internal/jobtest"
	"github.com/opsbot/opsbot/jobs"
	"github.com/opsbot/opsbot/ops"
)

// pacedChat is a recording chat (chatrec.Recorder) that asks for one
// update per interval (bot.Pacer), as Slack does.
type pacedChat struct {
	*chatrec.Recorder
	interval time.Duration
}

func (c pacedChat) EditInterval() time.Duration { return c.interval }

// TestRuntimePacesUpdates: the runtime is the one pacer. Twenty steps
// reported in well under a second (each given up to 20 ms to be shown on its
// own) reach a chat with a one-second interval as a few coalesced updates
// (every line kept, in order), not twenty edits and twenty replies; the
// final edit follows them, last.
func TestRuntimePacesUpdates(t *testing.T) {
	t.Parallel()
	var chat pacedChat
	shown := func(line string) bool {
		for _, m := range chat.Replies() {
			if strings.Contains(m.Text, line) {
				return true
			}
		}
		return false
	}
	backend := jobtest.Func(func(ctx context.Context, cmd commands.Job, rep ops.Reporter) (*ops.Result, error) {
		for i := range 20 {
			line := fmt.Sprintf("line %02d", i)
			rep.Report(ops.Event{Step: "work", Status: ops.StepProgress, Message: line})
			for deadline := time.Now().Add(20 * time.Millisecond); !shown(line) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		return &ops.Result{Summary: "all good"}, nil
	})
	chat = pacedChat{chatrec.New(), time.Second}
	h := newHarnessWith(t, backend, roles, func(o *jobs.EngineOptions) { o.Chats = map[string]Chat{"test": chat} })
	r := h.handle("olga", "mtp steps 4 qwen")
	j := h.wait(r.JobID)
	edits, replies := chat.Thread(j.Thread)
	if len(edits) > 6 || len(replies) > 5 {
		t.Fatalf("%d edits and %d replies for 20 steps reported at once; want them coalesced", len(edits), len(replies))
	}
	var all strings.Builder
	for _, m := range replies {
		all.WriteString(m.Text + "\n")
	}
	last := -1
	for i := range 20 {
		at := strings.Index(all.String(), fmt.Sprintf("line %02d", i))
		if at < last {
			t.Fatalf("line %02d missing or out of order:\n%s", i, all.String())
		}
		last = at
	}
	if f := edits[len(edits)-1]; !f.Final || f.Status != StatusSucceeded {
		t.Fatalf("last edit %+v; want the final one", f)
	}
}
