package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxWiringLines bounds the service's wiring: the non-blank, non-comment lines of its
// non-test Go files other than shipping.go, which holds the business code (the handler,
// its SQL and the payloads of its events).
const maxWiringLines = 40

// The wiring stays within maxWiringLines by the rule above.
func TestWiringLines(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "shipping.go" {
			continue
		}
		n := codeLines(t, name)
		t.Logf("%s: %d lines of wiring", name, n)
		total += n
	}
	if total == 0 || total > maxWiringLines {
		t.Errorf("%d lines of wiring, want 1..%d", total, maxWiringLines)
	}
}

// codeLines counts the non-blank lines of file that hold more than a comment.
func codeLines(t *testing.T, file string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	comment := map[int]bool{} // 1-based lines that hold only a comment
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			start, end := fset.Position(c.Pos()), fset.Position(c.End())
			before := strings.TrimSpace(lines[start.Line-1][:start.Column-1])
			after := strings.TrimSpace(lines[end.Line-1][end.Column-1:])
			for l := start.Line; l <= end.Line; l++ {
				comment[l] = (l > start.Line || before == "") && (l < end.Line || after == "")
			}
		}
	}
	n := 0
	for i, l := range lines {
		if strings.TrimSpace(l) != "" && !comment[i+1] {
			n++
		}
	}
	return n
}
