package bot

import (
	"strings"
	"testing"
	"time"

	"github.com/opsbot/opsbot/ops"
	"github.com/opsbot/opsbot/store"
)

// `svc logs` shows its journal lines on every platform: one preformatted
// block after the summary (fenced for chats; a terminal prints it plain).
func TestLogsResultGolden(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 3, 4, 5, 0, time.UTC)
	v := JobView{ID: 7, Command: "svc logs qwen lines=3", User: "olga", Status: store.Succeeded, Started: t0, Ended: t0.Add(40 * time.Millisecond),
		Summary: "last 3 journal lines of sglang-qwen.service on gpu1"}
	res := &ops.Result{Summary: v.Summary, Incidents: []string{},
		Details: []string{`known cause in these lines: gpu_memory_held: "Not enough memory. Please try to increase --mem-fraction-static."`},
		Logs: []string{
			"Mar 01 03:03:58 gpu1 systemd[1]: Started sglang-qwen.service - SGLang qwen.",
			"Mar 01 03:04:01 gpu1 python3[4242]: Not enough memory. Please try to increase --mem-fraction-static.",
			"Mar 01 03:04:02 gpu1 systemd[1]: sglang-qwen.service: Main process exited, code=exited, status=1/FAILURE",
		}}
	var b strings.Builder
	b.WriteString("## chat\n" + RenderResult(v, res) + "\n")
	b.WriteString("## terminal\n" + Plain(RenderResult(v, res)) + "\n")
	golden(t, "logs", b.String())
	for _, l := range res.Logs {
		if !strings.Contains(RenderResult(v, res), l) {
			t.Errorf("the result block lacks the journal line %q", l)
		}
	}
}
