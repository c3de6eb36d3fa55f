package conventions

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// libraryDirs are the directories of the library's packages, relative to the module
// root: every package an embedder imports, and the internal packages under them.
var libraryDirs = []string{
	"event", "contract", "tracing", "migrate", "idempotency", "lock", "outbox", "consumer",
	"app", "app/apptest", "tracker", "internal/*",
}

// root returns the module root (two levels above this package).
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOptionShape: every option type of the library (an exported type named …Option,
// or the element type of an exported function's variadic parameter declared in the same
// package with a function type taking a pointer) is func(*config) error with config an unexported struct
// type of the package, so an option validates its value and the constructor returns the
// error.
func TestOptionShape(t *testing.T) {
	seen := 0
	for _, pattern := range libraryDirs {
		dirs, err := filepath.Glob(filepath.Join(root(t), pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range dirs {
			for name, pkg := range parseDir(t, dir) {
				if name == "main" {
					continue
				}
				rel, _ := filepath.Rel(root(t), dir)
				seen += checkOptions(t, rel, pkg)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found %d option types in the library; the scan is broken", seen)
	}
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, dir string) map[string]*ast.Package {
	t.Helper()
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// checkOptions checks the option types of pkg and returns how many it found.
func checkOptions(t *testing.T, dir string, pkg *ast.Package) int {
	types := map[string]*ast.TypeSpec{}
	options := map[string]bool{}
	for _, f := range pkg.Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						types[ts.Name.Name] = ts
						if ts.Name.IsExported() && strings.HasSuffix(ts.Name.Name, "Option") {
							options[ts.Name.Name] = true
						}
					}
				}
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Type.Params == nil || len(d.Type.Params.List) == 0 {
					continue
				}
				last := d.Type.Params.List[len(d.Type.Params.List)-1]
				if e, ok := last.Type.(*ast.Ellipsis); ok {
					if id, ok := e.Elt.(*ast.Ident); ok && id.IsExported() {
						options[id.Name] = true
					}
				}
			}
		}
	}
	n := 0
	for name := range options {
		ts := types[name]
		if ts == nil {
			continue // not declared here, or a builtin
		}
		fn, ok := ts.Type.(*ast.FuncType)
		if !strings.HasSuffix(name, "Option") && (!ok || !firstParamPointer(fn)) {
			continue // a variadic parameter of another kind (keys, middlewares)
		}
		if !ok {
			t.Errorf("%s.%s is not a function type", dir, name)
			n++
			continue
		}
		n++
		if !optionShape(fn, types) {
			t.Errorf("%s.%s is not func(*config) error with config an unexported struct of the package", dir, name)
		}
	}
	return n
}

// optionShape reports whether fn is func(*c) error, c an unexported struct type of types.
func optionShape(fn *ast.FuncType, types map[string]*ast.TypeSpec) bool {
	if fn.Params == nil || len(fn.Params.List) != 1 || len(fn.Params.List[0].Names) > 1 ||
		fn.Results == nil || len(fn.Results.List) != 1 || len(fn.Results.List[0].Names) > 1 {
		return false
	}
	if res, ok := fn.Results.List[0].Type.(*ast.Ident); !ok || res.Name != "error" {
		return false
	}
	star, ok := fn.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	if !ok || id.IsExported() || types[id.Name] == nil {
		return false
	}
	_, isStruct := types[id.Name].Type.(*ast.StructType)
	return isStruct
}

// firstParamPointer reports whether fn's first parameter is a pointer: a function that
// sets something, as an option does.
func firstParamPointer(fn *ast.FuncType) bool {
	if fn.Params == nil || len(fn.Params.List) == 0 {
		return false
	}
	_, ok := fn.Params.List[0].Type.(*ast.StarExpr)
	return ok
}
