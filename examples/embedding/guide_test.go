package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/app/apptest"
	"github.com/choreo-saga/choreo/consumer"
)

// The guide's HTTP route publishes shipment.cancelled; its handler of order.cancelled
// refuses an order without a shipment: dead-lettered with the reason it gives.
func TestGuideBlocks(t *testing.T) {
	k := apptest.StartKit(t, apptest.NewInfra(t), func(ctx context.Context, opts ...app.Option) (*app.App, error) {
		svc, err := build(ctx, opts...)
		if err == nil {
			cancelRoute(svc)
			cancelShipments(svc)
			lockOnCustomer(svc)
		}
		return svc, err
	})
	resp, err := http.Post(k.BaseURL+"/shipments/o-2/cancel", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /shipments/o-2/cancel: %s", resp.Status)
	}
	if got := k.AwaitEvent("shipping.events", "o-2"); got.Type != "shipment.cancelled" {
		t.Errorf("published %s, want shipment.cancelled", got.Type)
	}

	k.Produce("orders.events", apptest.NewEvent(t, "orders", "order.cancelled", "o-3", map[string]string{"order_id": "o-3"}))
	apptest.WaitFor(t, "a dead letter", func() bool { return len(k.ReadAll("orders.events.dlq")) > 0 })
	reason := ""
	for _, h := range k.ReadAll("orders.events.dlq")[0].Headers {
		if h.Key == consumer.HeaderDLQReason {
			reason = string(h.Value)
		}
	}
	if reason != "no_shipment" {
		t.Errorf("dead-lettered with reason %q, want no_shipment", reason)
	}
}
