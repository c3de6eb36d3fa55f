package app_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choreo-saga/choreo/app"
	"github.com/choreo-saga/choreo/consumer"
	"github.com/choreo-saga/choreo/event"
)

// Reading configuration: every problem is reported at once, and the value of a
// secret-looking variable is never echoed.
func ExampleEnv() {
	env := app.MapEnv(map[string]string{
		"SHIPPING_RATE":  "1.5",
		"SHIPPING_DELAY": "soon",
		"DATABASE_URL":   "postgres://app:hunter2@db/shipping?sslmode=bogus",
	})
	rate := env.Float64("SHIPPING_RATE", 0)
	env.Check("SHIPPING_RATE", rate >= 0 && rate <= 1, "must be between 0 and 1")
	delay := env.Duration("SHIPPING_DELAY", time.Second)
	env.Fail("DATABASE_URL", "sslmode must be disable, require or verify-full")
	fmt.Println("delay falls back to", delay)
	fmt.Println(env.Err())
	// Output:
	// delay falls back to 1s
	// app: invalid configuration: SHIPPING_RATE="1.5": must be between 0 and 1
	// app: invalid configuration: SHIPPING_DELAY="soon": not a duration (e.g. "250ms", "5s", "1m")
	// app: invalid configuration: DATABASE_URL: sslmode must be disable, require or verify-full
}

// The shared variables and their defaults.
func ExampleLoadConfig() {
	env := app.MapEnv(map[string]string{"KAFKA_BROKERS": "k1:9092, k2:9092", "REDIS_ADDR": "none"})
	cfg := app.LoadConfig(env, "shipping", ":8090")
	fmt.Println(cfg.DatabaseName(), cfg.KafkaBrokers, cfg.RedisAddr == "", cfg.HTTPAddr, env.Err())
	// Output: choreo_shipping [k1:9092 k2:9092] true :8090 <nil>
}

func ExampleWithDeadLetterTopics() {
	fmt.Println(app.WithDeadLetterTopics("orders.events", "payments.events"))
	// Output: [orders.events payments.events orders.events.dlq payments.events.dlq]
}

// A whole service: a shipping service that schedules a shipment for every confirmed
// order and publishes shipment.scheduled through the outbox.
func ExampleNew() {
	env := app.NewEnv(nil)
	cfg := app.LoadConfig(env, "shipping", ":8090")
	if err := env.Err(); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	a, err := app.New(ctx, cfg, app.WithEntityAttribute("order.id"))
	if err != nil {
		log.Fatal(err)
	}
	if err := a.Migrate(ctx, "shipping", `CREATE TABLE IF NOT EXISTS shipments (order_id text PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	if err := a.EnsureTopics(ctx, "orders.events", "shipping.events"); err != nil {
		log.Fatal(err)
	}
	router := consumer.NewRouter().
		Handle("order.confirmed", func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
			if _, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.Subject); err != nil {
				return err
			}
			out, err := event.New("shipping", "shipment.scheduled", ev.Subject, map[string]string{"order_id": ev.Subject})
			if err != nil {
				return consumer.Permanent(err)
			}
			return a.Outbox.Enqueue(ctx, tx, "shipping.events", out.CausedBy(ev))
		}).
		Ignore("order.created", "order.rejected", "order.cancel_requested", "order.cancelled")
	if err := a.Consume(app.ConsumerSpec{Group: "shipping", Topics: []string{"orders.events"}, Router: router}); err != nil {
		log.Fatal(err)
	}
	a.HandleFunc("GET /shipments/{id}", func(w http.ResponseWriter, r *http.Request) {
		var id string
		err := a.Pool.QueryRow(r.Context(), `SELECT order_id FROM shipments WHERE order_id = $1`, r.PathValue("id")).Scan(&id)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "shipment for %s scheduled\n", id)
	})
	// Blocks until SIGTERM, then shuts down in order: HTTP, consumers, relay, connections, telemetry.
	if err := a.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
