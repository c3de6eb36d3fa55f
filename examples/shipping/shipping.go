package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// Event types this service reads and writes.
const (
	typeOrderConfirmed    = "order.confirmed"
	typeShipmentScheduled = "shipment.scheduled"
	source                = "shipping" // ce_source of the events written here
)

// orderConfirmed is the payload of order.confirmed, as the order service writes it.
type orderConfirmed struct {
	OrderID string `json:"order_id"`
}

// shipmentScheduled is the payload of shipment.scheduled.
type shipmentScheduled struct {
	ShipmentID string `json:"shipment_id"`
	OrderID    string `json:"order_id"`
	ShipBy     string `json:"ship_by"` // YYYY-MM-DD
}

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
// transaction, once per event id: it schedules the order's shipment and publishes
// shipment.scheduled through svc's outbox in the same transaction. Other event types on
// the orders topic are settled as ignored by the kit.
func schedule(svc *app.App) consumer.TxHandler {
	return func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		var in orderConfirmed
		if err := ev.DecodeData(&in); err != nil {
			return err // matches event.ErrMalformed: dead-lettered at once, reason "malformed"
		}
		if in.OrderID == "" || in.OrderID != ev.Subject {
			// No retry can fix this record: dead-lettered at once, reason "permanent".
			return consumer.Permanent(fmt.Errorf("order_id %q does not match the subject %q", in.OrderID, ev.Subject))
		}
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
		next, err := event.New(source, typeShipmentScheduled, out.OrderID, out)
		if err != nil {
			return err
		}
		// Same transaction: the event is published if and only if the shipment commits.
		// Published in the handler, it continues ev's saga (caused by ev, same correlation id).
		return svc.Publish(ctx, tx, shippingTopic, next)
	}
}
