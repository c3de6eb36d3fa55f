package contract_test

import (
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/internal/asyncapi"
)

func TestCatalogueAsyncAPIAndMarkdown(t *testing.T) {
	type item struct {
		SKU string `json:"sku" jsonschema:"maxLength=128" jsonschema_description:"Stock keeping unit."`
		Qty int    `json:"qty" jsonschema:"minimum=1"`
	}
	type payment struct {
		OrderID string `json:"order_id" jsonschema:"example=o-1"`
		Items   []item `json:"items,omitempty"`
	}
	p, err := contract.Declare[payment]("payment", contract.Produces, "payments", "payment.authorized", 1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := contract.Declare[payment]("order", contract.Consumes, "payments", "payment.authorized", 1)
	if err != nil {
		t.Fatal(err)
	}
	cat := catalogue(t, p, c)
	doc, err := cat.AsyncAPI("test", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := asyncapi.Validate(doc); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	for _, want := range []string{`"payload"`, `"maxLength": 128`, `"action": "receive"`, `"action": "send"`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("AsyncAPI lacks %s", want)
		}
	}
	md, err := cat.Markdown("Events", "intro")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## payment.authorized v1", "- Producer: payment (`contract_test.payment`)",
		"| `items[].sku` | string | yes | Stock keeping unit. |", "| `order_id` | string | yes |", `"order_id": "o-1"`} {
		if !strings.Contains(string(md), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
