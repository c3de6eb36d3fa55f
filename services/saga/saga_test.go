package saga_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/services/saga"
)

// renamed returns c with field from renamed to to in the top-level schema of every
// declaration of eventType in the given roles, as a rename in a shared Go type does.
func renamed(t *testing.T, c contract.Catalogue, eventType, from, to string, roles ...contract.Role) contract.Catalogue {
	t.Helper()
	var out []contract.Declaration
	for _, d := range c.Declarations {
		if d.Type == eventType && slices.Contains(roles, d.Role) {
			var s map[string]any
			if err := json.Unmarshal(d.Schema, &s); err != nil {
				t.Fatal(err)
			}
			if props, ok := s["properties"].(map[string]any); ok && props[from] != nil {
				props[to] = props[from]
				delete(props, from)
			}
			if req, ok := s["required"].([]any); ok {
				for i, r := range req {
					if r == from {
						req[i] = to
					}
				}
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			d.Schema = b
		}
		out = append(out, d)
	}
	cat, err := contract.NewCatalogue(out...)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func baseline(t *testing.T) contract.Catalogue {
	t.Helper()
	f, err := os.Open("baseline.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := contract.ReadCatalogue(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestContractsAgainstBaseline: the reference saga's declarations break no consumer of
// the committed baseline.
func TestContractsAgainstBaseline(t *testing.T) {
	cur, err := saga.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	r, err := contract.Check(baseline(t), cur)
	if err != nil {
		t.Fatal(err)
	}
	if r.Breaking() {
		t.Fatalf("breaking: %+v", r.Findings)
	}
}

// TestRenameAmount: renaming payment.authorized's amount in the shared type (producer and
// consumers in one commit) breaks order and inventory, each deployed against the other side.
func TestRenameAmount(t *testing.T) {
	cur, err := saga.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	cur = renamed(t, cur, "payment.authorized", "amount", "amount_cents", contract.Produces, contract.Consumes)
	r, err := contract.Check(baseline(t), cur)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.BrokenConsumers(); !r.Breaking() || !slices.Equal(got, []string{"inventory", "order"}) {
		t.Fatalf("broken consumers %v, want [inventory order]; findings %+v", got, r.Findings)
	}
	for _, f := range r.Findings {
		if f.Breaking && (f.Type != "payment.authorized" || f.Rule != contract.RuleFieldRemoved) {
			t.Errorf("unexpected breaking finding %+v", f)
		}
	}
}

// TestRenameUnread: payment.declined's only consumer (order) reads its order_id alone, so
// renaming its amount breaks nobody.
func TestRenameUnread(t *testing.T) {
	cur, err := saga.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	cur = renamed(t, cur, "payment.declined", "amount", "amount_cents", contract.Produces, contract.Consumes)
	r, err := contract.Check(baseline(t), cur)
	if err != nil {
		t.Fatal(err)
	}
	if r.Breaking() {
		t.Fatalf("breaking: %+v", r.Findings)
	}
	var unread bool
	for _, f := range r.Findings {
		unread = unread || f.Rule == contract.RuleFieldUnread && f.Field == "amount"
	}
	if !unread {
		t.Fatalf("findings %+v, want %s of amount", r.Findings, contract.RuleFieldUnread)
	}
}
