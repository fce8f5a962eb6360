package ops

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsbot/opsbot/commands"
)

// Every schedulable command (the job commands a schedule runs), every
// read-only host command and mtp undo (a host job no schedule runs) has a
// pipeline; nothing else does.
func TestPipelinesCoverJobCommands(t *testing.T) {
	hostOnly := map[string]bool{"mtp show": true, "gpu status": true, "svc status": true, "svc logs": true, "mtp undo": true}
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

// No code in ops picks behaviour by a command's path string: specs are bound
// to pipelines in one table. The test reads the package's sources.
func TestNoSwitchOnSpecPath(t *testing.T) {
	for _, pos := range specPathChoices(t, "*.go") {
		t.Errorf("%s: behaviour chosen by Spec.Path; bind it to the spec in the pipelines table", pos)
	}
}

// specPathChoices returns where the non-test files matching glob switch on or
// compare x.Spec.Path.
func specPathChoices(t *testing.T, glob string) []string {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			var xs []ast.Expr
			switch n := n.(type) {
			case *ast.SwitchStmt:
				xs = append(xs, n.Tag)
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					xs = append(xs, n.X, n.Y)
				}
			}
			for _, x := range xs {
				if sel, ok := x.(*ast.SelectorExpr); ok && sel.Sel.Name == "Path" {
					if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "Spec" {
						found = append(found, fset.Position(n.Pos()).String())
					}
				}
			}
			return true
		})
	}
	return found
}
