// Command shipping is a small service that embeds choreo in its own Kafka service, on
// the service kit (package app): it consumes order.confirmed from orders.events,
// schedules a shipment in its own shipments table and publishes shipment.scheduled to
// shipping.events through the transactional outbox, in the same transaction.
//
// main.go is all of its wiring: it declares what the service produces (Produces) and
// reads (app.On: order.confirmed, version 1, as an orderConfirmed), which is also the
// contract `sagactl contracts` reads. app.New reads the configuration from the environment
// (KAFKA_BROKERS, DATABASE_URL, REDIS_ADDR, OTEL_*, ...; see go doc ./app), migrates the
// library's tables and the shipments table, and Run starts the consumer group with the
// standard chain (tracing, dead letters, retries, per-order lock, idempotency), the
// outbox relay, the sweepers and /healthz, /readyz, /metrics, and shuts them down in
// order on SIGTERM. shipping.go is the business handler.
//
// The tests show a handler's end-to-end test on apptest.StartKit: an in-process
// Kafka-protocol broker, the machine's Postgres and Redis, the service started on them.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/choreo-saga/choreo/app"
)

// Topics this service reads and writes.
const (
	ordersTopic   = "orders.events"
	shippingTopic = "shipping.events"
)

func main() {
	ctx := context.Background()
	svc, err := build(ctx)
	if err != nil {
		slog.Error("shipping: start", "error", err)
		os.Exit(2)
	}
	if err := svc.Run(ctx); err != nil {
		slog.Error("shipping: stopped", "error", err)
		os.Exit(1)
	}
}

// build creates the service and registers its handler; opts come last (tests point the
// service at their infrastructure with them).
func build(ctx context.Context, opts ...app.Option) (*app.App, error) {
	svc, err := app.New(ctx, "shipping", append([]app.Option{
		app.WithSchema("shipping", shipmentsSchema),
		app.WithEntityAttribute("order.id"),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	svc.Produces(shipmentScheduledEvent)
	app.On(svc, ordersTopic, typeOrderConfirmed, 1, schedule(svc))
	return svc, nil
}
