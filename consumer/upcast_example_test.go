package consumer_test

import (
	"encoding/json"
	"fmt"

	"github.com/choreo-saga/choreo/consumer"
)

// A consumer whose handler reads v2 of payment.authorized, where v2 renamed v1's amount
// to amount_cents: a v1 payload is upcast before the handler sees it (docs/contracts.md).
func ExampleNewUpcasters() {
	// snippet:start upcasters
	ups, err := consumer.NewUpcasters(
		consumer.WithUpcaster("payment.authorized", 1, 2, func(v1 json.RawMessage) (json.RawMessage, error) {
			var p struct {
				OrderID string `json:"order_id"`
				Amount  int64  `json:"amount"`
			}
			if err := json.Unmarshal(v1, &p); err != nil {
				return nil, err
			}
			return json.Marshal(map[string]any{"order_id": p.OrderID, "amount_cents": p.Amount})
		}),
		consumer.WithDeclaredVersions("payment.authorized", 2), // what the handler reads
	)
	// then: consumer.Standard(consumer.StandardConfig{ /* ... */ Upcasters: ups})
	// snippet:end upcasters
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ups.Declared("payment.authorized"))
	// Output: [2] true
}
