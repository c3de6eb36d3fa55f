package contract_test

import (
	"testing"

	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
)

type benchItem struct {
	SKU string `json:"sku" jsonschema:"maxLength=128"`
	Qty int    `json:"qty"`
}

type benchPayload struct {
	OrderID    string      `json:"order_id" jsonschema:"maxLength=128"`
	CustomerID string      `json:"customer_id" jsonschema:"maxLength=128"`
	Amount     int64       `json:"amount"`
	Items      []benchItem `json:"items,omitempty" jsonschema:"maxItems=100"`
	Reason     string      `json:"reason,omitempty" jsonschema:"maxLength=256"`
}

// BenchmarkDecode measures contract.Decode (validate, then unmarshal) of a payment-sized
// payload, beside a bare unmarshal.
func BenchmarkDecode(b *testing.B) {
	ev, err := event.New("payment", "payment.authorized", "0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f", benchPayload{
		OrderID: "0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f", CustomerID: "c-1", Amount: 500,
		Items: []benchItem{{"sku-1", 2}, {"sku-2", 1}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := contract.Decode[benchPayload](ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			var p benchPayload
			if err := ev.DecodeData(&p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
