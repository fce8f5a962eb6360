package commands_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImports keeps the package pure: of opsbot's packages it imports only
// ops (the runbook its job commands run on) and ops/unit (the home of the
// steps limit), nothing else of ours (bot, store, config, ...), and none of
// the standard library's I/O packages.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"os", "os/exec", "net", "net/http", "io/ioutil", "log", "log/slog"}
	const ours = "github.com/opsbot/opsbot"
	allowed := map[string]bool{ours + "/ops": true, ours + "/ops/unit": true}
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
			if (path == ours || strings.HasPrefix(path, ours+"/")) && !allowed[path] {
				t.Errorf("%s imports %s: of ours commands imports only ops and ops/unit", f, path)
			}
			for _, b := range banned {
				if path == b {
					t.Errorf("%s imports %s: commands does no I/O", f, path)
				}
			}
		}
	}
}
