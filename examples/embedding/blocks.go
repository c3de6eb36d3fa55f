package main

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
	"github.com/choreo-saga/choreo/lock"
	"github.com/choreo-saga/choreo/migrate"
	"github.com/choreo-saga/choreo/outbox"
	"github.com/choreo-saga/choreo/tracing"
)

// The code blocks of README.md and docs/architecture.md (see doc.go): the building
// blocks without the kit.

// embedConsumer is README.md's consumer embedded in a service of its own, on pool, rdb
// and the Kafka cluster at brokers, until ctx ends.
func embedConsumer(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client, brokers []string) error {
	// snippet:start readme-consumer
	// Spans, metrics and W3C propagation from the OTEL_* variables (no endpoint: nothing
	// is exported). Without it the upstream trace context still flows through.
	tel, err := tracing.Setup(ctx, "payment")
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.WithoutCancel(ctx))
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...)) // publishes dead letters
	if err != nil {
		return err
	}
	defer producer.Close()
	ob, err := outbox.New()
	if err != nil {
		return err
	}
	router := consumer.NewRouter().
		Handle("order.created", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			var order struct {
				Amount int `json:"amount"`
			}
			if err := ev.DecodeData(&order); err != nil {
				return err // malformed: dead-lettered at once
			}
			if _, err := tx.Exec(ctx, `INSERT INTO payments (order_id, amount) VALUES ($1, $2)`, ev.Subject, order.Amount); err != nil {
				return err // retried with backoff and full jitter, then dead-lettered
			}
			next, err := event.New("payment", "payment.authorized", ev.Subject, order)
			if err != nil {
				return err
			}
			return ob.Enqueue(ctx, tx, "payments.events", next.CausedBy(ev)) // same transaction
		})
	locker, err := lock.New(rdb) // per-entity leases
	if err != nil {
		return err
	}
	h, err := consumer.Standard(consumer.StandardConfig{
		DB: pool, Router: router, DeadLetter: producer, Name: "charge",
		Locker: locker, AfterCommit: []func(){ob.Wake}, EntityAttribute: "order.id",
	})
	if err != nil {
		return err
	}
	c, err := consumer.New(brokers, "payment", []string{"orders.events"}, h)
	if err != nil {
		return err
	}
	err = c.Run(ctx) // graceful: finishes in-flight events and commits on cancel
	// Leases are released in the background; let the last releases reach Redis.
	return errors.Join(err, locker.Wait(context.WithoutCancel(ctx)))
	// snippet:end readme-consumer
}

// migrateLibrary creates or upgrades the library's tables in pool's database.
func migrateLibrary(ctx context.Context, pool *pgxpool.Pool) error {
	// snippet:start migrate
	err := migrate.Up(ctx, pool) // or migrate.Up(ctx, pool, migrate.IdempotencyTable("billing.idem"), ...)
	// snippet:end migrate
	return err
}
