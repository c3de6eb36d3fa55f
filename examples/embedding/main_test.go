package main

import (
	"testing"

	"github.com/choreo-saga/choreo/app/apptest"
)

func TestScheduled(t *testing.T) {
	k := apptest.StartKit(t, apptest.NewInfra(t), build)
	in := apptest.NewEvent(t, "orders", "order.confirmed", "o-1", confirmed{OrderID: "o-1"})
	k.ProduceTwice("orders.events", in)
	got := k.AwaitEvent("shipping.events", "o-1")
	if got.Type != "shipment.scheduled" || got.CausationID != in.ID {
		t.Fatalf("published %s caused by %q", got.Type, got.CausationID)
	}
	k.Settled()
	if n := k.Count(`SELECT count(*) FROM shipments WHERE order_id = $1`, "o-1"); n != 1 {
		t.Fatalf("%d shipments for one order delivered twice", n)
	}
}
