package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/bot/console"
	"github.com/opsbot/opsbot/internal/testrun"
)

// `mtp undo` with nothing to undo is refused at once: no confirmation is
// asked (--yes is not needed), and no job is made.
func TestRunUndoWithNothingToUndoIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	code, out, errs := runArgs(t, "run", "--lab", "--json", "mtp undo", "jobs all")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != 2 {
		t.Fatalf("exit %d, %d lines; want 1 and 2\n%s\n%s", code, len(lines), out, errs)
	}
	var undo, list console.JSONLine
	if err := json.Unmarshal([]byte(lines[0]), &undo); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &list); err != nil {
		t.Fatal(err)
	}
	if undo.Job != nil || undo.Error == nil || !strings.Contains(*undo.Error, "nothing to undo on qwen") {
		t.Errorf("mtp undo: %s", lines[0])
	}
	if list.Jobs == nil || len(*list.Jobs) != 0 {
		t.Errorf("a job was made: %s", lines[1])
	}
}

// `opsbot run --config FILE --lab` keeps FILE's store but starts a new lab
// each run: `mtp undo` of a change made on an earlier run's lab says the
// lab was rebuilt, not that someone edited the unit.
func TestRunUndoOnARebuiltLabSaysSo(t *testing.T) {
	t.Parallel()
	testrun.Long(t)
	dir := t.TempDir()
	cfg := writeFile(t, filepath.Join(dir, "opsbot.yaml"), "store: {path: opsbot.db}\n")
	if code, out, errs := runArgs(t, "run", "--config", cfg, "--lab", "mtp steps 5"); code != 0 {
		t.Fatalf("mtp steps 5: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := runArgs(t, "run", "--config", cfg, "--lab", "--yes", "mtp undo")
	if code != 1 || !strings.Contains(out+errs, "cannot undo #1 `mtp steps 5 qwen`: it was made on a lab that has been rebuilt since") ||
		strings.Contains(out+errs, "by hand") {
		t.Fatalf("mtp undo on the next run's lab: exit %d\n%s\n%s", code, out, errs)
	}
}
