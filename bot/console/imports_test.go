package console

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The console is a chat like any other: it reaches the bot through its
// door, never the store, the hosts or the lab.
func TestImportsOnlyTheBot(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"store", "config", "lab", "ops/remote", "ops/systemd", "ops/gpu", "ops/bench", "ops/engine", "ops/unit"}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			for _, b := range banned {
				if path == "github.com/opsbot/opsbot/"+b {
					t.Errorf("%s imports %s: the console talks to the bot only", f, path)
				}
			}
		}
	}
}
