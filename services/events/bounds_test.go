package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/choreo-saga/choreo/contract"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/services/events"
)

func TestBounds(t *testing.T) {
	id := "0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f"
	ok := events.PaymentV1{OrderID: id, CustomerID: "c-1", Amount: 1, Reason: strings.Repeat("r", events.MaxReasonBytes)}
	bad := map[string]any{
		"reason":      events.PaymentV1{OrderID: id, CustomerID: "c-1", Reason: strings.Repeat("\x1b[31m", 300<<10/5)},
		"customer_id": events.OrderCreatedV1{OrderID: id, CustomerID: strings.Repeat("c", events.MaxIDBytes+1)},
		"items":       events.StockV1{OrderID: id, Items: make([]events.Item, events.MaxItems+1)},
		"sku":         events.StockV1{OrderID: id, Items: []events.Item{{SKU: strings.Repeat("s", events.MaxIDBytes+1), Qty: 1}}},
		"cancel":      events.OrderCancelRequestedV1{OrderID: id, Reason: strings.Repeat("x", events.MaxReasonBytes+1)},
	}
	ev, err := event.New(events.SourcePayment, events.PaymentDeclined, id, ok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := contract.Decode[events.PaymentV1](ev); err != nil {
		t.Fatalf("reason at the bound: %v", err)
	}
	for name, p := range bad {
		ev, err := event.New("x", "x.y", id, p)
		if err != nil {
			t.Fatal(err)
		}
		var derr error
		switch p.(type) {
		case events.PaymentV1:
			_, derr = contract.Decode[events.PaymentV1](ev)
		case events.OrderCreatedV1:
			_, derr = contract.Decode[events.OrderCreatedV1](ev)
		case events.StockV1:
			_, derr = contract.Decode[events.StockV1](ev)
		case events.OrderCancelRequestedV1:
			_, derr = contract.Decode[events.OrderCancelRequestedV1](ev)
		}
		if !errors.Is(derr, event.ErrMalformed) || !errors.Is(derr, event.ErrInvalidPayload) || len(derr.Error()) > 512 {
			t.Errorf("%s: %.200v", name, derr)
		}
	}
}

func TestValidSubject(t *testing.T) {
	for s, ok := range map[string]bool{
		"0197b3b8-7c1e-7a55-9b4e-5a1f3c2d1e0f": true, "o-1": true, "tenant:o_1.v2": true,
		"": false, "../../etc": false, "a/b": false, ".hidden": false, "o\x1b[31m": false, "o 1": false,
		strings.Repeat("a", events.MaxIDBytes+1): false,
	} {
		if err := events.ValidSubject(s); (err == nil) != ok {
			t.Errorf("ValidSubject(%q) = %v", s, err)
		}
	}
}
