package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/internal/asyncapi"
)

const referenceBaseline = "../../services/saga/baseline.json"

// runSagactl runs sagactl with args and returns its exit code, stdout and stderr.
func runSagactl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, stdio{out: &out, err: &errb, getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

// catalogueWithRename writes the reference catalogue (sagactl contracts) with field
// renamed in every declaration of eventType, as a rename in the shared Go type does, and
// returns the file's path.
func catalogueWithRename(t *testing.T, eventType, field, to string) string {
	t.Helper()
	code, out, errs := runSagactl(t, "contracts")
	if code != exitOK {
		t.Fatalf("sagactl contracts: exit %d: %s", code, errs)
	}
	var cat struct {
		Declarations []map[string]any `json:"declarations"`
	}
	if err := json.Unmarshal([]byte(out), &cat); err != nil {
		t.Fatal(err)
	}
	for _, d := range cat.Declarations {
		if d["type"] != eventType {
			continue
		}
		s := d["schema"].(map[string]any)
		props := s["properties"].(map[string]any)
		if props[field] == nil {
			continue
		}
		props[to] = props[field]
		delete(props, field)
		for i, r := range s["required"].([]any) {
			if r == field {
				s["required"].([]any)[i] = to
			}
		}
	}
	b, err := json.Marshal(cat)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "catalogue.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestContractsCheck(t *testing.T) {
	t.Run("reference saga against its baseline", func(t *testing.T) {
		code, out, errs := runSagactl(t, "contracts", "check", "--baseline", referenceBaseline)
		if code != exitOK {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
	})
	t.Run("payment.authorized amount renamed", func(t *testing.T) {
		cat := catalogueWithRename(t, "payment.authorized", "amount", "amount_cents")
		code, out, errs := runSagactl(t, "contracts", "check", "--baseline", referenceBaseline, "-catalogue", cat)
		if code != exitFailure {
			t.Fatalf("exit %d, want %d\n%s%s", code, exitFailure, out, errs)
		}
		for _, want := range []string{"BREAKING", "field-removed", "payment.authorized v1", "new payment", "deployed order", "deployed inventory"} {
			if !strings.Contains(out, want) {
				t.Errorf("table does not mention %q:\n%s", want, out)
			}
		}
		if !strings.Contains(errs, "consumers broken: inventory, order") {
			t.Errorf("stderr %q does not name inventory and order", errs)
		}
		code, out, _ = runSagactl(t, "contracts", "check", "-baseline", referenceBaseline, "-catalogue", cat, "-json")
		var r checkJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitFailure || !r.Breaking ||
			strings.Join(r.BrokenConsumers, ",") != "inventory,order" {
			t.Fatalf("-json: exit %d, %+v, %v\n%s", code, r, err, out)
		}
		_, out, _ = runSagactl(t, "contracts", "check", "-baseline", referenceBaseline, "-catalogue", cat, "-format", "github")
		want := "::error file=../../services/saga/baseline.json,title=contract field-removed::payment.authorized v1 amount: new payment → deployed order: "
		if !strings.Contains(out, want) {
			t.Errorf("github annotations do not contain %q:\n%s", want, out)
		}
	})
	t.Run("payment.declined amount renamed: no consumer reads it", func(t *testing.T) {
		cat := catalogueWithRename(t, "payment.declined", "amount", "amount_cents")
		code, out, errs := runSagactl(t, "contracts", "check", "-baseline", referenceBaseline, "-catalogue", cat)
		if code != exitOK || !strings.Contains(out, "field-dropped-unread") {
			t.Fatalf("exit %d, want 0 and a field-dropped-unread finding\n%s%s", code, out, errs)
		}
	})
	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"contracts", "check"},
			{"contracts", "check", "-baseline", referenceBaseline, "-format", "xml"},
			{"contracts", "check", "-baseline", "no-such-file.json"},
			{"contracts", "frobnicate"},
		} {
			if code, _, _ := runSagactl(t, args...); code != exitUsage {
				t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
			}
		}
	})
}

// TestContractsGenerated: docs/events.md and docs/events.asyncapi.json are what
// `sagactl contracts` writes from the reference saga's declarations, and the AsyncAPI
// document is valid AsyncAPI 3.0.0.
func TestContractsGenerated(t *testing.T) {
	dir := t.TempDir()
	md, aa := filepath.Join(dir, "events.md"), filepath.Join(dir, "events.asyncapi.json")
	if code, _, errs := runSagactl(t, "contracts", "-markdown", md, "-asyncapi", aa); code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for gen, committed := range map[string]string{md: "../../docs/events.md", aa: "../../docs/events.asyncapi.json"} {
		want, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from the declarations (%v); regenerate it: go run ./cmd/sagactl contracts -asyncapi docs/events.asyncapi.json -markdown docs/events.md", committed, err)
		}
		if gen == aa {
			if err := asyncapi.Validate(want); err != nil {
				t.Error(err)
			}
		}
	}
}
