package main

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/event"
)

const schema = `CREATE TABLE IF NOT EXISTS shipments (order_id text PRIMARY KEY)`

// confirmed is what the service reads of order.confirmed; scheduled is what it writes.
type (
	confirmed struct {
		OrderID string `json:"order_id"`
	}
	scheduled struct {
		OrderID string `json:"order_id"`
	}
)

// shipmentScheduled declares the event the service writes: topic, type, version, payload.
var shipmentScheduled = app.Producer[scheduled]{Source: "shipping", Topic: "shipping.events", Type: "shipment.scheduled", Version: 1}

// build is what main runs, and what the tests start (apptest.StartKit).
func build(ctx context.Context, opts ...app.Option) (*app.App, error) {
	svc, err := app.New(ctx, "shipping", append([]app.Option{app.WithSchema("shipping", schema)}, opts...)...)
	if err != nil {
		return nil, err
	}
	svc.Produces(shipmentScheduled)
	app.On(svc, "orders.events", "order.confirmed", 1, func(ctx context.Context, tx pgx.Tx, ev event.Event, in confirmed) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, in.OrderID); err != nil {
			return err // rolled back and retried
		}
		return shipmentScheduled.Publish(ctx, tx, svc, ev.Subject, scheduled{OrderID: in.OrderID}) // caused by ev
	})
	return svc, nil
}

func main() {
	ctx := context.Background()
	svc, err := build(ctx)
	if err != nil {
		log.Fatal(err) // every configuration problem at once
	}
	if err := svc.Run(ctx); err != nil { // until SIGTERM, then an ordered shutdown
		log.Fatal(err)
	}
}
