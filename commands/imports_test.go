package commands_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImports keeps the package pure: no imports of opsbot packages, and none
// of the standard library's I/O packages.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"os", "os/exec", "net", "net/http", "io/ioutil", "log", "log/slog"}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if strings.HasPrefix(path, "github.com/opsbot/opsbot") {
				t.Errorf("%s imports %s: commands imports nothing of ours", f, path)
			}
			for _, b := range banned {
				if path == b {
					t.Errorf("%s imports %s: commands does no I/O", f, path)
				}
			}
		}
	}
}
