package conventions

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/choreo-saga/choreo"

// layers are the floors of the repository, lowest first: a package may import packages of
// its own floor or lower ones, never a higher one. A package belongs to the floor of the
// longest prefix that names it.
var layers = [][]string{
	{"event"},
	{"contract"},
	{"tracing"},
	{"internal"},
	{"migrate"},
	{"idempotency", "lock", "outbox"},
	{"consumer"},
	{"app", "tracker"},
	{"services"},
	{"cmd", "tools", "bench", "chaos", "examples", "deploy"},
}

// floor returns the floor of the module-relative package path rel, or -1.
func floor(rel string) int {
	best, n := -1, -1
	for i, names := range layers {
		for _, name := range names {
			if (rel == name || strings.HasPrefix(rel, name+"/")) && len(name) > n {
				best, n = i, len(name)
			}
		}
	}
	return best
}

type listed struct {
	ImportPath string
	Imports    []string
	Module     *struct{ Path string }
}

// modulePackages returns the module's packages and their (non-test) imports, from
// go list -deps -json ./... run at the module root.
func modulePackages(t *testing.T) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Dir = root(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module != nil && p.Module.Path == module {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// TestLayering: no package imports one of a higher floor (event at the ground, contract,
// tracing, internal, migrate, the building blocks, consumer, the kit and the tracker,
// the reference services, the tools), and no package under services/ imports one of the
// library's internal packages: the services use what an embedder can.
func TestLayering(t *testing.T) {
	pkgs := modulePackages(t)
	if len(pkgs) < 30 {
		t.Fatalf("go list found %d packages of the module; the listing is broken", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		from := floor(rel)
		if from < 0 {
			t.Errorf("%s belongs to no floor: add it to layers", rel)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			irel := strings.TrimPrefix(imp, module+"/")
			if to := floor(irel); to > from {
				t.Errorf("%s (floor %d) imports %s (floor %d), a higher floor", rel, from, irel, to)
			}
			if strings.HasPrefix(rel, "services/") && strings.HasPrefix(irel, "internal/") {
				t.Errorf("%s imports %s: a reference service uses only what an embedder can import", rel, irel)
			}
		}
	}
}
