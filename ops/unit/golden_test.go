package unit

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

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
			checkGolden(t, strings.TrimSuffix(f, ".service")+".after", e.After)
			checkGolden(t, strings.TrimSuffix(f, ".service")+".diff", e.Diff)
			if e.SpecAfter.DraftSteps() != 10 {
				t.Errorf("steps after = %d", e.SpecAfter.DraftSteps())
			}
			if slices.Equal(e.ArgvBefore, e.ArgvAfter) {
				t.Errorf("argv unchanged")
			}
		})
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}
