package unit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/internal/testkit"
)

// TestEditGoldens edits every testdata/edit/*.service to steps 10 and compares
// the result and its diff with NAME.after and NAME.diff.
func TestEditGoldens(t *testing.T) {
	files, err := filepath.Glob("testdata/edit/*.service")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".service")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			u, err := Parse(filepath.Base(f), string(in))
			if err != nil {
				t.Fatal(err)
			}
			eff, err := Merge(u)
			if err != nil {
				t.Fatal(err)
			}
			e, err := eff.SetSteps(10, Options{})
			if err != nil {
				t.Fatalf("SetSteps: %v", err)
			}
			testkit.Golden(t, "edit/"+name+".after", e.After)
			testkit.Golden(t, "edit/"+name+".diff", e.Diff)
			if e.SpecAfter.DraftSteps() != 10 {
				t.Errorf("steps after = %d", e.SpecAfter.DraftSteps())
			}
			if slices.Equal(e.ArgvBefore, e.ArgvAfter) {
				t.Errorf("argv unchanged")
			}
		})
	}
}
