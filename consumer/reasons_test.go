package consumer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestReasonsListsEveryReason: Reasons returns the value of every Reason* constant the
// package declares, in declaration order, so a tool that refuses an unknown reason
// (sagactl dlq -reason) knows a new one as soon as it exists.
func TestReasonsListsEveryReason(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, f := range pkgs["consumer"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						declared = append(declared, v)
					}
				}
			}
		}
	}
	got := Reasons()
	for _, d := range declared {
		if !slices.Contains(got, d) {
			t.Errorf("Reasons() lacks %q, a declared Reason constant", d)
		}
	}
	if len(got) != len(declared) {
		t.Errorf("Reasons() = %v; declared %v", got, declared)
	}
}
