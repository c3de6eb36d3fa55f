package contract_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/choreo-saga/choreo/contract"
)

// at returns d at version v.
func at(d contract.Declaration, v int) contract.Declaration { d.Version = v; return d }

// TestCheckVersionUpgrade walks a v2 of payment.authorized (amount renamed amount_cents)
// through the releases the gate lets pass, consumers first, and the shortcuts it stops.
func TestCheckVersionUpgrade(t *testing.T) {
	v1Producer := decl("payment", contract.Produces, amountRequired)
	v2Producer := at(decl("payment", contract.Produces, amountRenamed), 2)
	v1Order := decl("order", contract.Consumes, consumerOfAmount)
	v2Order := at(decl("order", contract.Consumes, amountRenamed), 2)
	acceptsV1 := decl("order", contract.Accepts, consumerOfAmount)

	deployed := catalogue(t, v1Producer, v1Order)
	// Release 1: order handles v2 and upcasts v1; payment may write v2 but still writes v1.
	release1 := catalogue(t, v1Producer, v2Producer, v2Order, acceptsV1)
	// Release 2: payment writes v2 only; order still accepts v1 for the records left.
	release2 := catalogue(t, v2Producer, v2Order, acceptsV1)
	// Release 3: order drops its upcaster.
	release3 := catalogue(t, v2Producer, v2Order)

	for _, step := range []struct {
		name           string
		from, to       contract.Catalogue
		breaking, info []string
	}{
		{"consumers first", deployed, release1, nil, []string{contract.RuleVersionNew}},
		{"then producers", release1, release2, nil, nil},
		{"then the upcaster goes", release2, release3, nil, nil},
		{"producer first", deployed, catalogue(t, v2Producer, v1Order), []string{contract.RuleEventDropped}, []string{contract.RuleVersionNew}},
		{"upcaster dropped while v1 is written", release1, catalogue(t, v1Producer, v2Producer, v2Order), []string{contract.RuleVersionUnread}, nil},
	} {
		r, err := contract.Check(step.from, step.to)
		if err != nil {
			t.Fatal(err)
		}
		if got := rules(r, true); !slices.Equal(got, step.breaking) {
			t.Errorf("%s: breaking rules %v, want %v (findings %+v)", step.name, got, step.breaking, r.Findings)
		}
		if got := rules(r, false); !slices.Equal(got, step.info) {
			t.Errorf("%s: other rules %v, want %v (findings %+v)", step.name, got, step.info, r.Findings)
		}
	}
}

// TestAcceptsRole: an accepts declaration reads its version like a consumer (its schema
// is checked against the producer's) and survives the catalogue's JSON form.
func TestAcceptsRole(t *testing.T) {
	c := catalogue(t, decl("payment", contract.Produces, amountRenamed), decl("order", contract.Accepts, consumerOfAmount))
	k := contract.Key{Type: "payment.authorized", Version: 1}
	if cs := c.Consumers(k); len(cs) != 1 || cs[0].Role != contract.Accepts {
		t.Fatalf("consumers %+v, want order accepting", cs)
	}
	r, err := contract.Check(c, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := rules(r, true); !slices.Equal(got, []string{contract.RuleFieldRemoved}) {
		t.Fatalf("breaking rules %v, want the upcaster's input missing amount", got)
	}
	var buf bytes.Buffer
	if err := c.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := contract.ReadCatalogue(&buf)
	if err != nil || len(back.Consumers(k)) != 1 {
		t.Fatalf("read back: %+v, %v", back, err)
	}
}
