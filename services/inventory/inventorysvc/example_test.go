package inventorysvc_test

import (
	"fmt"

	"github.com/choreo-saga/choreo/services/inventory/inventorysvc"
)

// The INVENTORY_SEED format: SKU:QTY, SKUs may be ranges.
func ExampleParseStock() {
	st, err := inventorysvc.ParseStock("sku-1..sku-2:10000,sku-rare:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(st)
	// Output: [{sku-1 10000} {sku-2 10000} {sku-rare 0}]
}

// Stock is conserved when, for every SKU, what was seeded is either still available,
// held by a reservation, or sold to a confirmed order.
func ExampleAudit_Conserved() {
	a := inventorysvc.Audit{SKUs: map[string]inventorysvc.SKUAudit{
		"sku-1": {Initial: 10, Available: 6, Reserved: 1, Committed: 3},
	}}
	fmt.Println(a.Conserved())
	// Output: <nil>
}
