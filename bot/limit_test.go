package bot

import (
	"strings"
	"testing"

	"github.com/opsbot/opsbot/commands"
	"github.com/opsbot/opsbot/internal/jobtest"
)

// The input limit counts the text as typed: padding that trimming would remove
// still counts, so a flood of spaces cannot carry a command past the limit.
func TestInputLimitCountsRawText(t *testing.T) {
	t.Parallel()
	h := newHarness(t, jobtest.OK(), roles)
	for _, text := range []string{
		strings.Repeat(" ", 1020) + "jobs all",
		strings.Repeat(" ", 1020) + "mtp steps 10",
		strings.Repeat(" ", 1020) + "confirm abcdef",
	} {
		r := h.handle("alice", text)
		if r.Outcome != Invalid || !strings.Contains(r.Text, "too long") {
			t.Errorf("%d bytes: outcome %s text %q; want invalid, too long", len(text), r.Outcome, r.Text)
		}
		if _, err := h.disp.Parse(text); err == nil || !strings.Contains(err.Error(), "too long") {
			t.Errorf("Parse %d bytes: err %v; want too long", len(text), err)
		}
	}
	if r := h.handle("alice", strings.Repeat(" ", commands.MaxInputLen-4)+"jobs"); r.Outcome == Invalid {
		t.Errorf("exactly %d bytes refused: %q", commands.MaxInputLen, r.Text)
	}
}
