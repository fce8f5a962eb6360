package ops

import (
	"testing"

	"github.com/opsbot/opsbot/commands"
)

// Every schedulable command (the job commands a schedule runs), every
// read-only host command and mtp undo (a host job no schedule runs) has a
// pipeline; nothing else does.
func TestPipelinesCoverJobCommands(t *testing.T) {
	t.Parallel()
	hostOnly := map[string]bool{"mtp show": true, "gpu status": true, "svc status": true, "svc logs": true, "mtp undo": true, "mtp per-load": true}
	n := 0
	for _, s := range commands.Specs() {
		want := s.Schedulable || hostOnly[s.Path]
		if want {
			n++
		}
		if got := PipelineFor(s) != nil; got != want {
			t.Errorf("%s: has a pipeline %v, want %v", s.Path, got, want)
		}
	}
	if len(pipelines) != n {
		t.Errorf("%d pipelines for %d host commands: some are bound to specs outside the registry", len(pipelines), n)
	}
}
