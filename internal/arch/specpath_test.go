package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// No code in bot or ops picks behaviour by a command's path string: a
// command's behaviour is bound to its type (its file in commands; the door's
// answers in bot/handlers.go switch on the type). The test reads the
// packages' sources: a switch on, or a comparison with, x.Spec().Path (or a
// Spec field's Path) fails it.
func TestNoSwitchOnSpecPath(t *testing.T) {
	for _, dir := range []string{"bot", "ops"} {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for _, pos := range specPathChoices(t, f, nil) {
				t.Errorf("%s: behaviour chosen by Spec.Path; bind it to the spec in the package's table", pos)
			}
		}
	}
}

// The check finds what it looks for.
func TestSpecPathChoicesFound(t *testing.T) {
	src := "package p\nfunc f(c *C) {\n\tswitch c.Spec.Path {\n\t}\n\tif c.Spec().Path == \"mtp steps\" {\n\t}\n\t_ = c.Path == \"\"\n}\n"
	if got := specPathChoices(t, "p.go", src); len(got) != 2 {
		t.Fatalf("found %v, want the switch and the comparison", got)
	}
}

// specPathChoices returns where file (or src, when not nil) switches on or
// compares x.Spec.Path.
func specPathChoices(t *testing.T, file string, src any) []string {
	t.Helper()
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, file, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
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
				inner := sel.X
				if call, ok := inner.(*ast.CallExpr); ok {
					inner = call.Fun
				}
				if inner, ok := inner.(*ast.SelectorExpr); ok && inner.Sel.Name == "Spec" {
					found = append(found, fset.Position(n.Pos()).String())
				}
			}
		}
		return true
	})
	return found
}
