package main

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
)

// Event types this service reads and writes.
const (
	typeOrderConfirmed    = "order.confirmed"
	typeShipmentScheduled = "shipment.scheduled"
	source                = "shipping" // ce_source of the events written here
)

// orderConfirmed is what this service reads of order.confirmed: the order id only (the
// order service writes more; unknown fields are ignored).
type orderConfirmed struct {
	OrderID string `json:"order_id" jsonschema:"maxLength=128"`
}

// Subject returns the order id: app.On dead-letters an order.confirmed whose order_id is
// not its subject (the Kafka key) as malformed.
func (p orderConfirmed) Subject() string { return p.OrderID }

// shipmentScheduled is the payload of shipment.scheduled.
type shipmentScheduled struct {
	ShipmentID string `json:"shipment_id" jsonschema:"format=uuid"`
	OrderID    string `json:"order_id"`
	ShipBy     string `json:"ship_by" jsonschema:"format=date"` // YYYY-MM-DD
}

// shipmentScheduledEvent is the producer of shipment.scheduled, version 1.
var shipmentScheduledEvent = app.Producer[shipmentScheduled]{Source: source, Topic: shippingTopic, Type: typeShipmentScheduled, Version: 1}

// shipmentsSchema creates the service's own table (app.WithSchema applies it at every
// start, under an advisory lock, so it is idempotent).
const shipmentsSchema = `
CREATE TABLE IF NOT EXISTS shipments (
    order_id    text        PRIMARY KEY,
    shipment_id uuid        NOT NULL UNIQUE,
    ship_by     date        NOT NULL,
    event_id    text        NOT NULL, -- the order.confirmed that scheduled it
    created_at  timestamptz NOT NULL DEFAULT now()
);`

// schedule returns the handler of order.confirmed. It runs in the consumer's
// transaction, once per event id, with the payload decoded and checked (app.On): it
// schedules the order's shipment and publishes shipment.scheduled through svc's outbox
// in the same transaction. Other event types on the orders topic are settled as ignored
// by the kit.
func schedule(svc *app.App) func(ctx context.Context, tx pgx.Tx, ev event.Event, in orderConfirmed) error {
	return func(ctx context.Context, tx pgx.Tx, ev event.Event, in orderConfirmed) error {
		out := shipmentScheduled{
			ShipmentID: uuid.NewString(),
			OrderID:    in.OrderID,
			ShipBy:     ev.Time.Add(48 * time.Hour).Format(time.DateOnly),
		}
		tag, err := tx.Exec(ctx, `INSERT INTO shipments (order_id, shipment_id, ship_by, event_id)
VALUES ($1, $2, $3, $4) ON CONFLICT (order_id) DO NOTHING`, out.OrderID, out.ShipmentID, out.ShipBy, ev.ID)
		if err != nil {
			return err // transient: retried with backoff, then dead-lettered
		}
		if tag.RowsAffected() == 0 {
			// The order already has a shipment, scheduled by another event id (the order
			// service sent a second order.confirmed, or someone re-produced a fixed one).
			return nil
		}
		// Same transaction: the event is published if and only if the shipment commits.
		// Published in the handler, it continues ev's saga (caused by ev, same correlation id).
		return shipmentScheduledEvent.Publish(ctx, tx, svc, out.OrderID, out)
	}
}
