package main

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

const schema = `CREATE TABLE IF NOT EXISTS shipments (order_id text PRIMARY KEY)`

// build is what main runs, and what the tests start (apptest.StartKit).
func build(ctx context.Context, opts ...app.Option) (*app.App, error) {
	svc, err := app.New(ctx, "shipping", append([]app.Option{
		app.WithSchema("shipping", schema),
		app.WithTopics("shipping.events"),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	svc.Handle("orders.events", "order.confirmed", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.Subject); err != nil {
			return err // rolled back and retried
		}
		next, err := event.New("shipping", "shipment.scheduled", ev.Subject, map[string]string{"order_id": ev.Subject})
		if err != nil {
			return consumer.Permanent(err) // dead-lettered at once
		}
		return svc.Publish(ctx, tx, "shipping.events", next) // caused by ev, in ev's saga
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
