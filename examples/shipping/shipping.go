package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/outbox"
)

// Event types this service reads and writes.
const (
	typeOrderConfirmed    = "order.confirmed"
	typeShipmentScheduled = "shipment.scheduled"
	source                = "shipping" // ce_source of the events written here
)

// otherOrderTypes are the other events on the orders topic: known, not ours. The router
// settles them without work; any type neither handled nor ignored is dead-lettered.
var otherOrderTypes = []string{"order.created", "order.rejected", "order.cancel_requested", "order.cancelled"}

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

// shipmentsSchema creates the service's own table. Like the library's migrations it is
// idempotent and takes a transaction-scoped advisory lock, so instances starting
// together do not race on CREATE TABLE (sent without arguments, the statements run as
// one implicit transaction).
const shipmentsSchema = `
SELECT pg_advisory_xact_lock(4242001);
CREATE TABLE IF NOT EXISTS shipments (
    order_id    text        PRIMARY KEY,
    shipment_id uuid        NOT NULL UNIQUE,
    ship_by     date        NOT NULL,
    event_id    text        NOT NULL, -- the order.confirmed that scheduled it
    created_at  timestamptz NOT NULL DEFAULT now()
);`

// scheduler handles order.confirmed.
type scheduler struct {
	outbox *outbox.Outbox
	topic  string // where shipment.scheduled goes
}

// schedule runs in the consumer's transaction, once per event id: it schedules the
// order's shipment and enqueues shipment.scheduled in the same transaction.
func (s *scheduler) schedule(ctx context.Context, tx pgx.Tx, ev event.Event) error {
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
	return s.outbox.Enqueue(ctx, tx, s.topic, next.CausedBy(ev))
}
