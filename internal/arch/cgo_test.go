package arch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoCgo: opsbot, with Matrix end-to-end encryption built in (-tags
// goolm) or not, needs no C: no package outside Go's standard library that
// the binary imports has cgo files (mattn/go-sqlite3 and libolm are the ones
// mautrix would pull in by default), so CGO_ENABLED=0 builds it whole and
// the store's keys go through the pure-Go SQLite driver.
func TestNoCgo(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, tags := range []string{"", "goolm"} {
		cmd := exec.Command("go", "list", "-tags", tags, "-deps",
			"-f", "{{if and (not .Standard) (or .CgoFiles .CFiles)}}{{.ImportPath}}{{end}}", "./cmd/opsbot")
		cmd.Dir = root
		// With cgo on, the go tool lists the cgo files a package would use.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list (tags %q): %v\n%s", tags, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != "" {
			t.Errorf("with tags %q the binary imports packages that use cgo:\n%s", tags, got)
		}
	}
}
