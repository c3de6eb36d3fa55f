package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// marker names the source of the Go block that follows it: a file, relative to the
// module's root, and optionally a region of it.
var marker = regexp.MustCompile(`^<!-- snippet: ([^ #]+)(?:#([^ ]+))? -->$`)

// Every Go block of README.md and docs/*.md is preceded by a snippet marker and is
// exactly the code it names (see doc.go), so the docs cannot show code that does not
// build.
func TestDocSnippets(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, doc := range append(docs, filepath.Join(root, "README.md")) {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		lines := strings.Split(string(src), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```go" {
				continue
			}
			start := i + 1
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			}
			blocks++
			block := strings.Join(lines[start:i], "\n") + "\n"
			var m []string
			if start > 1 {
				m = marker.FindStringSubmatch(strings.TrimSpace(lines[start-2]))
			}
			if m == nil {
				t.Errorf("%s:%d: a Go block without a marker: put its code in a file the module builds "+
					"(examples/embedding) and write <!-- snippet: path --> or <!-- snippet: path#region --> on the line before it", name, start)
				continue
			}
			want, err := snippet(filepath.Join(root, m[1]), m[2])
			if err != nil {
				t.Errorf("%s:%d: %v", name, start, err)
				continue
			}
			if block != want {
				t.Errorf("%s:%d: the block differs from %s%s at its line %d; copy the source into the doc:\n%s",
					name, start, m[1], "#"+m[2], firstDiff(block, want), want)
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no Go block found in the docs")
	}
}

// snippet returns file's text, or with a region name the lines strictly between
// "// snippet:start region" and "// snippet:end region", without the indentation they
// share.
func snippet(file, region string) (string, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if region == "" {
		return string(src), nil
	}
	lines := strings.Split(string(src), "\n")
	from, to := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case "// snippet:start " + region:
			from = i + 1
		case "// snippet:end " + region:
			to = i
		}
	}
	if from < 0 || to < from {
		return "", &os.PathError{Op: "find region " + region, Path: file, Err: os.ErrNotExist}
	}
	lines = lines[from:to]
	indent := ""
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lead := l[:len(l)-len(strings.TrimLeft(l, "\t"))]
		if i == 0 || len(lead) < len(indent) {
			indent = lead
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(lines, "\n") + "\n", nil
}

// firstDiff returns the 1-based number of the first line where a and b differ.
func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl))
}
