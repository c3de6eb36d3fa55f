package consumer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestReasonsListsEveryReason: Reasons returns the value of every Reason* constant the
// package declares, in declaration order, so a tool that refuses an unknown reason
// (sagactl dlq -reason) knows a new one as soon as it exists.
func TestReasonsListsEveryReason(t *testing.T) {
	_, declared := declaredReasons(t)
	got := Reasons()
	for _, d := range declared {
		if !slices.Contains(got, d) {
			t.Errorf("Reasons() lacks %q, a declared Reason constant", d)
		}
	}
	if !slices.Equal(got, declared) {
		t.Errorf("Reasons() = %v; declared %v", got, declared)
	}
}

// declaredReasons parses the package's Reason* string constants: by name, and their
// values in declaration order.
func declaredReasons(t *testing.T) (map[string]string, []string) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	var values []string
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
						byName[n.Name] = v
						values = append(values, v)
					}
				}
			}
		}
	}
	return byName, values
}

// TestRejectReasonsAreListed: every consumer.Reject call of the library and the reference
// services passes a Reason constant that Reasons lists, so the reasons their dead letters
// can carry are Reason's classifications and these, all listed. The one other caller is
// decodeRefusal, which reads back a reason a Reject stored. examples/ is left out: it
// shows a service with reasons of its own.
func TestRejectReasonsAreListed(t *testing.T) {
	reasons, _ := declaredReasons(t)
	root := ".."
	fset := token.NewFileSet()
	calls := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules" || n == "examples") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		inConsumer := f.Name.Name == "consumer"
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				if x, ok := fn.X.(*ast.Ident); !ok || x.Name != "consumer" || fn.Sel.Name != "Reject" {
					return true
				}
			case *ast.Ident:
				if !inConsumer || fn.Name != "Reject" {
					return true
				}
			default:
				return true
			}
			calls++
			var name string
			switch a := call.Args[0].(type) {
			case *ast.SelectorExpr:
				if x, ok := a.X.(*ast.Ident); ok && x.Name == "consumer" {
					name = a.Sel.Name
				}
			case *ast.Ident:
				if inConsumer {
					name = a.Name
				}
			}
			pos := fset.Position(call.Pos())
			if inConsumer && name == "reason" && strings.HasSuffix(pos.Filename, "idempotent.go") {
				return true // decodeRefusal
			}
			if v, ok := reasons[name]; !ok || !slices.Contains(Reasons(), v) {
				t.Errorf("%s: Reject(%s, …): the reason is not a Reason constant that Reasons lists", pos, types.ExprString(call.Args[0]))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 3 {
		t.Fatalf("found %d Reject calls; the walk missed the services", calls)
	}
}
