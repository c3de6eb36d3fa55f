package contract_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/choreo-saga/choreo/contract"
)

// decl declares schema (a JSON Schema document) for service in role on payment.authorized v1.
func decl(service string, role contract.Role, schema string) contract.Declaration {
	return contract.Declaration{Service: service, Role: role, Topic: "payments", Type: "payment.authorized",
		Version: 1, Payload: "test.Payment", Schema: []byte(schema)}
}

func catalogue(t *testing.T, decls ...contract.Declaration) contract.Catalogue {
	t.Helper()
	c, err := contract.NewCatalogue(decls...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// check runs Check between a baseline of (producer, consumer) schemas and a current tree
// where both sides changed to (newProducer, newConsumer).
func check(t *testing.T, producer, consumer, newProducer, newConsumer string) contract.Report {
	t.Helper()
	base := catalogue(t, decl("payment", contract.Produces, producer), decl("order", contract.Consumes, consumer))
	cur := catalogue(t, decl("payment", contract.Produces, newProducer), decl("order", contract.Consumes, newConsumer))
	r, err := contract.Check(base, cur)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func rules(r contract.Report, breaking bool) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Breaking == breaking && !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	return out
}

const (
	amountRequired   = `{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"}},"required":["order_id","amount"]}`
	amountRenamed    = `{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer"}},"required":["order_id","amount_cents"]}`
	consumerOfAmount = `{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"}},"required":["order_id","amount"]}`
)

// TestCheckRules: each rule with a breaking and a non-breaking change.
func TestCheckRules(t *testing.T) {
	cases := []struct {
		name                                         string
		producer, consumer, newProducer, newConsumer string
		breaking                                     string // the breaking rule, or "" for none
	}{
		{"field-removed: a required field renamed in the shared type", amountRequired, consumerOfAmount, amountRenamed,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer"}},"required":["order_id","amount_cents"]}`,
			contract.RuleFieldRemoved},
		{"field-removed: a field no consumer reads",
			`{"type":"object","properties":{"order_id":{"type":"string"},"note":{"type":"string"}},"required":["order_id","note"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`, ""},
		{"field-optional: a required field becomes omitempty", amountRequired, consumerOfAmount,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"}},"required":["order_id"]}`,
			consumerOfAmount, contract.RuleFieldOptional},
		{"field-optional: a field the consumer does not require becomes optional", amountRequired,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"}},"required":["order_id"]}`, ""},
		{"field-retyped: integer to string", amountRequired, consumerOfAmount,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"string"}},"required":["order_id","amount"]}`,
			consumerOfAmount, contract.RuleFieldRetyped},
		{"field-retyped: integer to a number consumer", amountRequired,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"number"}},"required":["order_id","amount"]}`,
			amountRequired,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"number"}},"required":["order_id","amount"]}`, ""},
		{"field-retyped: nullable producer field, non-null consumer", amountRequired, consumerOfAmount,
			`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"oneOf":[{"type":"integer"},{"type":"null"}]}},"required":["order_id","amount"]}`,
			consumerOfAmount, contract.RuleFieldRetyped},
		{"enum-narrowed: consumer drops a value the producer writes",
			`{"type":"object","properties":{"status":{"type":"string","enum":["a","b"]}},"required":["status"]}`,
			`{"type":"object","properties":{"status":{"type":"string","enum":["a","b"]}},"required":["status"]}`,
			`{"type":"object","properties":{"status":{"type":"string","enum":["a","b"]}},"required":["status"]}`,
			`{"type":"object","properties":{"status":{"type":"string","enum":["a"]}},"required":["status"]}`, contract.RuleEnumNarrowed},
		{"enum-narrowed: producer writes fewer values",
			`{"type":"object","properties":{"status":{"type":"string","enum":["a","b"]}},"required":["status"]}`,
			`{"type":"object","properties":{"status":{"type":"string","enum":["a","b"]}},"required":["status"]}`,
			`{"type":"object","properties":{"status":{"type":"string","enum":["a"]}},"required":["status"]}`,
			`{"type":"object","properties":{"status":{"type":"string","enum":["a","b"]}},"required":["status"]}`, ""},
		{"bound-narrowed: consumer maxLength below the producer's",
			`{"type":"object","properties":{"order_id":{"type":"string","maxLength":128}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string","maxLength":128}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string","maxLength":128}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string","maxLength":64}},"required":["order_id"]}`, contract.RuleBoundNarrowed},
		{"bound-narrowed: consumer minimum on a field the producer bounds higher",
			`{"type":"object","properties":{"qty":{"type":"integer","minimum":1}},"required":["qty"]}`,
			`{"type":"object","properties":{"qty":{"type":"integer","minimum":1}},"required":["qty"]}`,
			`{"type":"object","properties":{"qty":{"type":"integer","minimum":2}},"required":["qty"]}`,
			`{"type":"object","properties":{"qty":{"type":"integer","minimum":1}},"required":["qty"]}`, ""},
		{"bound-narrowed: in an array's items",
			`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","maxLength":128}},"required":["sku"]}}}}`,
			`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","maxLength":128}},"required":["sku"]}}}}`,
			`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","maxLength":128}},"required":["sku"]}}}}`,
			`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","maxLength":8}},"required":["sku"]}}}}`, contract.RuleBoundNarrowed},
		{"closed-object: producer adds a field a closed consumer refuses",
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`,
			`{"type":"object","properties":{"order_id":{"type":"string"},"extra":{"type":"string"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`, contract.RuleClosedObject},
		{"field-added: producer adds a field an open consumer ignores",
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":true}`,
			`{"type":"object","properties":{"order_id":{"type":"string"},"extra":{"type":"string"}},"required":["order_id"]}`,
			`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":true}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := check(t, tc.producer, tc.consumer, tc.newProducer, tc.newConsumer)
			got := rules(r, true)
			if tc.breaking == "" {
				if r.Breaking() {
					t.Fatalf("breaking findings %+v, want none", r.Findings)
				}
				return
			}
			if !r.Breaking() || !slices.Contains(got, tc.breaking) {
				t.Fatalf("breaking rules %v, want %s; findings %+v", got, tc.breaking, r.Findings)
			}
			if bc := r.BrokenConsumers(); !slices.Equal(bc, []string{"order"}) {
				t.Fatalf("broken consumers %v, want [order]", bc)
			}
		})
	}
}

// TestCheckSharedTypeRename: producer and consumer change together; the new tree agrees
// with itself, yet each side breaks the deployed other side.
func TestCheckSharedTypeRename(t *testing.T) {
	r := check(t, amountRequired, consumerOfAmount, amountRenamed, amountRenamed)
	var sides []string
	for _, f := range r.Findings {
		if f.Breaking && f.Field == "amount" || f.Breaking && f.Field == "amount_cents" {
			sides = append(sides, f.Producer+" → "+f.Consumer)
		}
	}
	want := []string{"new payment → deployed order", "deployed payment → new order"}
	for _, w := range want {
		if !slices.Contains(sides, w) {
			t.Errorf("no breaking finding for %s; got %v", w, sides)
		}
	}
}

// TestCheckFieldAddedAndUnread: the producer's own changes are reported, not breaking.
func TestCheckFieldAddedAndUnread(t *testing.T) {
	r := check(t,
		`{"type":"object","properties":{"order_id":{"type":"string"},"note":{"type":"string"}},"required":["order_id"]}`,
		`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`,
		`{"type":"object","properties":{"order_id":{"type":"string"},"memo":{"type":"string"}},"required":["order_id"]}`,
		`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)
	if r.Breaking() {
		t.Fatalf("breaking: %+v", r.Findings)
	}
	if got := rules(r, false); !slices.Contains(got, contract.RuleFieldUnread) || !slices.Contains(got, contract.RuleFieldAdded) {
		t.Fatalf("rules %v, want %s and %s", got, contract.RuleFieldUnread, contract.RuleFieldAdded)
	}
}

// TestCheckEventDropped: a producer stops declaring an event a deployed consumer reads.
func TestCheckEventDropped(t *testing.T) {
	base := catalogue(t, decl("payment", contract.Produces, amountRequired), decl("order", contract.Consumes, consumerOfAmount))
	r, err := contract.Check(base, catalogue(t, decl("order", contract.Consumes, consumerOfAmount)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rules(r, true), contract.RuleEventDropped) {
		t.Fatalf("findings %+v, want %s", r.Findings, contract.RuleEventDropped)
	}
	// Dropped with its consumer in one commit: the deployed consumer runs until its own
	// deploy, so it is still breaking.
	r, err = contract.Check(base, contract.Catalogue{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rules(r, true), contract.RuleEventDropped) {
		t.Fatalf("findings %+v, want %s", r.Findings, contract.RuleEventDropped)
	}
}

// TestCheckUnchanged: identical catalogues have no finding.
func TestCheckUnchanged(t *testing.T) {
	r := check(t, amountRequired, consumerOfAmount, amountRequired, consumerOfAmount)
	if len(r.Findings) != 0 {
		t.Fatalf("findings %+v, want none", r.Findings)
	}
}

func TestCatalogue(t *testing.T) {
	c := catalogue(t, decl("order", contract.Consumes, consumerOfAmount), decl("inventory", contract.Consumes, consumerOfAmount),
		decl("payment", contract.Produces, amountRequired))
	if got := c.Services(); !slices.Equal(got, []string{"inventory", "order", "payment"}) {
		t.Fatalf("services %v", got)
	}
	k := contract.Key{Type: "payment.authorized", Version: 1}
	if got := c.Keys(); !slices.Equal(got, []contract.Key{k}) {
		t.Fatalf("keys %v", got)
	}
	if ps := c.Producers(k); len(ps) != 1 || ps[0].Service != "payment" {
		t.Fatalf("producers %+v", ps)
	}
	if cs := c.Consumers(k); len(cs) != 2 || cs[0].Service != "inventory" || cs[1].Service != "order" {
		t.Fatalf("consumers %+v", cs)
	}
	var buf bytes.Buffer
	if err := c.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := contract.ReadCatalogue(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Declarations) != 3 || back.Declarations[0].Service != "payment" {
		t.Fatalf("read back %+v", back.Declarations)
	}
	ps, cs, err := back.Schemas(k)
	if err != nil || len(ps) != 1 || len(cs) != 2 {
		t.Fatalf("schemas: %d producers, %d consumers, %v", len(ps), len(cs), err)
	}
	if err := cs["order"].Validate([]byte(`{"order_id":"o-1"}`)); err == nil {
		t.Fatal("order's schema accepts a payload without amount")
	}
}

func TestCatalogueInvalid(t *testing.T) {
	d := decl("payment", contract.Produces, amountRequired)
	for name, decls := range map[string][]contract.Declaration{
		"twice":      {d, d},
		"no service": {decl("", contract.Produces, amountRequired)},
		"bad role":   {decl("payment", "writes", amountRequired)},
		"version 0":  {func() contract.Declaration { x := d; x.Version = 0; return x }()},
		"no schema":  {decl("payment", contract.Produces, "")},
	} {
		if _, err := contract.NewCatalogue(decls...); !errors.Is(err, contract.ErrInvalidCatalogue) {
			t.Errorf("%s: error %v, want ErrInvalidCatalogue", name, err)
		}
	}
	for name, doc := range map[string]string{
		"unknown field": `{"declarations":[],"extra":1}`,
		"bad schema":    `{"declarations":[{"service":"p","role":"produces","topic":"t","type":"x","version":1,"payload":"P","schema":{"type":12}}]}`,
		"not json":      `{`,
	} {
		if _, err := contract.ReadCatalogue(bytes.NewReader([]byte(doc))); !errors.Is(err, contract.ErrInvalidCatalogue) {
			t.Errorf("%s: error %v, want ErrInvalidCatalogue", name, err)
		}
	}
}

func TestDeclare(t *testing.T) {
	type payment struct {
		OrderID string `json:"order_id" jsonschema:"maxLength=128"`
		Amount  int64  `json:"amount"`
		Reason  string `json:"reason,omitempty"`
	}
	d, err := contract.Declare[payment]("payment", contract.Produces, "payments", "payment.authorized", 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Payload != "contract_test.payment" {
		t.Fatalf("payload %q", d.Payload)
	}
	s, err := contract.ParseSchema(d.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate([]byte(`{"order_id":"o","amount":1,"extra":true}`)); err != nil {
		t.Fatalf("unknown field refused: %v", err)
	}
	if err := s.Validate([]byte(`{"order_id":"o"}`)); err == nil {
		t.Fatal("missing amount accepted")
	}
	if _, err := contract.Declare[payment]("payment", contract.Produces, "payments", "payment.authorized", 0); !errors.Is(err, contract.ErrInvalidCatalogue) {
		t.Fatalf("version 0: %v", err)
	}
}

// TestCheckBrokenFieldNotReportedUnread: a field whose removal breaks a consumer is not
// also reported as dropped unread.
func TestCheckBrokenFieldNotReportedUnread(t *testing.T) {
	r := check(t, amountRequired, consumerOfAmount, amountRenamed, amountRenamed)
	for _, f := range r.Findings {
		if !f.Breaking {
			t.Errorf("non-breaking finding %+v beside the breaking ones", f)
		}
	}
}
